"""Mandarin tone sandhi on citation-tone pinyin, with word boundaries.

Why not ``pypinyin(..., tone_sandhi=True)``: in pypinyin 0.55 its rules fire only on some lookup
paths. 你好 -> ni2 hao3 works, but 保管, 老鼠 and 展览馆 keep all third tones, 一天 stays yi1 tian1,
and rules never look across the word boundaries that jieba draws (我|不|知道). So we take citation
tones from pypinyin and apply the rules here, over a whole clause, knowing the words.

Rules (input: words of ``(character, pinyin with tone digit 1-5)``; ``None`` pinyin = not Han, which
breaks every rule chain):

不 (bù)
    before a fourth tone -> bu2 (不是 bu2 shi4, 不要); otherwise bu4; a neutral bu5 from the
    dictionary stays.
一 (yī)
    yi1 when counting or ordinal: after 第 or a numeral (十一, 二零二一), before a numeral other than
    百/千/万/亿 (一二三), before 点 + numeral (一点五), before 月 or 号 and in 月一日 (一月, 一号,
    三月一日), at the end of a clause or of a word of two or more syllables (统一, 唯一). yi5
    between a repeated verb (看一看, but not in 一个一个, 一天一天). Otherwise yi2 before a fourth tone (一个, 一定, 一下) and yi4
    before tones 1-3 and the neutral tone (一天, 一年, 一起, 一百).
Third tone
    Applied after 一/不. Inside a word, every third tone followed by another third tone becomes
    second: 你好 ni2 hao3, 老鼠 lao2 shu3, 展览馆 zhan2 lan2 guan3 (the usual 2-2-3 for three
    syllables). Then across each word boundary, judged on the result of the first step (not
    cascading): a word's last syllable becomes second tone when the next word starts with a syllable
    that is still third tone. This gives 保管|好 bao2 guan2 hao3 (2+1 -> 2 2 3), 老|保管 lao3 bao2 guan3
    (1+2 -> 3 2 3), 我|很|好 wo2 hen2 hao3 and 你|想|买|水果 ni2 xiang2 mai3 shui2 guo3. Neutral
    tones and non-Han characters end a chain.
"""

from __future__ import annotations

from typing import Sequence

_NUMERALS = set("零〇一二两三四五六七八九十百千万亿")
_SCALE = set("百千万亿")

Word = Sequence[tuple[str, "str | None"]]


def _tone(pinyin: str | None) -> int | None:
    if pinyin and pinyin[-1] in "12345":
        return int(pinyin[-1])
    return None


def _with_tone(pinyin: str, tone: int) -> str:
    return pinyin[:-1] + str(tone) if pinyin[-1] in "12345" else pinyin + str(tone)


def apply(words: Sequence[Word]) -> list[list[str | None]]:
    """Sandhi-adjusted pinyin for each character of each word (same shape as the input)."""
    chars: list[str] = []
    pinyins: list[str | None] = []
    word_of: list[int] = []  # index of the word each syllable belongs to
    for w, word in enumerate(words):
        for ch, py in word:
            chars.append(ch)
            pinyins.append(py)
            word_of.append(w)
    n = len(chars)
    citation = [_tone(p) for p in pinyins]
    tones = list(citation)

    def word_len(i: int) -> int:
        return len(words[word_of[i]])

    def last_in_word(i: int) -> bool:
        return i + 1 == n or word_of[i + 1] != word_of[i]

    for i, ch in enumerate(chars):
        if tones[i] is None:
            continue
        nxt = citation[i + 1] if i + 1 < n else None
        if ch == "不" and tones[i] != 5:
            tones[i] = 2 if nxt == 4 else 4
        elif ch == "一":
            prev_ch = chars[i - 1] if i > 0 else ""
            next_ch = chars[i + 1] if i + 1 < n else ""
            after_next = chars[i + 2] if i + 2 < n else ""
            if (prev_ch == "第" or prev_ch in _NUMERALS
                    or (next_ch in _NUMERALS and next_ch not in _SCALE)
                    or (next_ch == "点" and after_next in _NUMERALS)
                    or next_ch in "月号" or (next_ch == "日" and prev_ch == "月")
                    or nxt is None or (last_in_word(i) and word_len(i) > 1)):
                tones[i] = 1
            elif prev_ch and prev_ch == next_ch and (i < 2 or chars[i - 2] != "一"):
                tones[i] = 5
            else:
                tones[i] = 2 if nxt == 4 else 4

    # Third tone, step 1: inside words.
    step1 = list(tones)
    for i in range(n - 1):
        if tones[i] == 3 and tones[i + 1] == 3 and word_of[i] == word_of[i + 1]:
            step1[i] = 2
    # Step 2: across word boundaries, judged on step 1 only.
    final = list(step1)
    for i in range(n - 1):
        if word_of[i] != word_of[i + 1] and step1[i] == 3 and step1[i + 1] == 3:
            final[i] = 2

    out: list[list[str | None]] = [[] for _ in words]
    for i in range(n):
        py = pinyins[i]
        if py is not None and final[i] is not None and final[i] != citation[i]:
            py = _with_tone(py, final[i])
        out[word_of[i]].append(py)
    return out
