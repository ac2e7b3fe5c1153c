"""Text normalization and sentence splitting the way CosyVoice2's own frontend does it.

Chinese text (any CJK ideograph): wetext zh TN, then upstream's clean-ups (drop newlines, keep a blank
only between two ASCII characters, ``²``/``³`` spelled, ``.`` -> ``。``, `` - `` -> ``，``, brackets
removed, trailing commas -> ``。``) and a split where length counts characters. Other text: wetext en
TN, any digits left spelled out, and a split where length counts tokenizer tokens. Both splits use
upstream's lengths (at most 80, at least 60 before a cut, a tail under 20 merged into the previous
piece) and drop pieces that are only punctuation. Japanese/Korean script skips TN and uses the
character split. Text with special markup (``<|...|>``) is not normalized, as upstream.

This is CosyVoice's own text handling, kept apart from :mod:`cosyedge.text` (Kokoro's frontend): the
model was trained on upstream's normalization, so this module follows upstream's rules, not ours.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from typing import Callable

logger = logging.getLogger(__name__)

TOKEN_MAX_N = 80
TOKEN_MIN_N = 60
MERGE_LEN = 20
ZH_PUNCT = ("。", "？", "！", "；", "：", "、", ".", "?", "!", ";")
EN_PUNCT = (".", "?", "!", ";", ":")

_CJK = re.compile(r"[\u4e00-\u9fff]")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af]")
_DIGITS = re.compile(r"\d+")

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10 ** 12, "trillion"), (10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"))


def contains_chinese(text: str) -> bool:
    return bool(_CJK.search(text))


def number_to_words(n: int) -> str:
    """English words for a non-negative integer ("one hundred and twenty-three"), inflect's style."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + (" and " + number_to_words(rest) if rest else "")
    for size, name in _SCALES:
        if n >= size:
            head, rest = divmod(n, size)
            tail = "" if not rest else (" and " if rest < 100 else ", ") + number_to_words(rest)
            return number_to_words(head) + " " + name + tail
    raise AssertionError("unreachable")


def spell_out_numbers(text: str) -> str:
    """Replace each run of ASCII digits by English words (upstream does this with inflect)."""
    def words(match: re.Match) -> str:
        digits = match.group(0)
        if len(digits) > 15:  # longer than any scale: read digit by digit
            return " ".join(_ONES[int(d)] for d in digits)
        return number_to_words(int(digits))
    return _DIGITS.sub(lambda m: words(m) if m.group(0).isascii() else m.group(0), text)


def replace_blank(text: str) -> str:
    """Keep a space only when both neighbours are non-space ASCII characters."""
    out = []
    for i, c in enumerate(text):
        if c == " ":
            prev = text[i - 1] if i > 0 else " "
            nxt = text[i + 1] if i + 1 < len(text) else " "
            if prev.isascii() and prev != " " and nxt.isascii() and nxt != " ":
                out.append(c)
        else:
            out.append(c)
    return "".join(out)


def is_only_punctuation(text: str) -> bool:
    """True for empty text or text made only of punctuation and symbols (Unicode P* and S*)."""
    return all(unicodedata.category(c)[0] in "PS" for c in text)


def split_paragraph(text: str, length: Callable[[str], int], zh: bool, token_max_n: int = TOKEN_MAX_N,
                    token_min_n: int = TOKEN_MIN_N, merge_len: int = MERGE_LEN) -> list[str]:
    """Cut at sentence punctuation, then pack pieces up to ``token_max_n`` (upstream's split_paragraph)."""
    punct = ZH_PUNCT if zh else EN_PUNCT
    if not text:
        return []
    if text[-1] not in punct:
        text += "。" if zh else "."
    pieces: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        if text[i] in punct:
            end = i + 1
            if i + 1 < len(text) and text[i + 1] in ('"', "”"):  # keep a closing quote with its sentence
                end = i + 2
            if text[start:i]:
                pieces.append(text[start:end])
            elif end > i + 1 and pieces:
                pieces[-1] += text[i + 1:end]
            start = end
            i = end
            continue
        i += 1
    out: list[str] = []
    current = ""
    for piece in pieces:
        if length(current + piece) > token_max_n and length(current) > token_min_n:
            out.append(current)
            current = ""
        current += piece
    if current:
        if length(current) < merge_len and out:
            out[-1] += current
        else:
            out.append(current)
    return out


class TextNormalizer:
    """Normalizes and splits text for the CosyVoice2 LLM; ``tokenize`` measures English lengths."""

    def __init__(self, tokenize: Callable[[str], list[int]], use_wetext: bool = True) -> None:
        self.tokenize = tokenize
        self._zh = self._en = None
        self._lock = threading.Lock()  # wetext's FST normalizers are not documented as thread-safe
        if use_wetext:
            try:
                from wetext import Normalizer

                self._zh = Normalizer(lang="zh", operator="tn", remove_erhua=False)
                self._en = Normalizer(lang="en", operator="tn")
            except Exception as exc:  # wetext missing or its FSTs unreadable: upstream also goes on
                logger.warning("wetext text normalization unavailable (%s); numbers may be read digit-wise", exc)

    def normalize_zh(self, text: str) -> str:
        if self._zh is not None:
            with self._lock:
                text = self._zh.normalize(text)
        text = replace_blank(text.replace("\n", ""))
        text = text.replace("²", "平方").replace("³", "立方").replace(".", "。").replace(" - ", "，")
        for ch in ("（", "）", "【", "】", "`"):
            text = text.replace(ch, "")
        text = text.replace("——", " ")
        return re.sub(r"[，,、]+$", "。", text)

    def normalize_en(self, text: str) -> str:
        if self._en is not None:
            with self._lock:
                text = self._en.normalize(text)
        return spell_out_numbers(text)

    def normalize(self, text: str) -> str:
        """One normalized string (used for prompt transcripts, which are never split)."""
        text = text.strip()
        if not text or ("<|" in text and "|>" in text):
            return text
        if contains_chinese(text):
            return self.normalize_zh(text)
        if _KANA_HANGUL.search(text):
            return text
        return self.normalize_en(text)

    def split(self, text: str) -> list[str]:
        """Normalized sentences to synthesize one by one (pieces of only punctuation dropped)."""
        text = text.strip()
        if not text:
            return []
        if "<|" in text and "|>" in text:
            return [text]
        cjk_like = contains_chinese(text) or bool(_KANA_HANGUL.search(text))
        normalized = self.normalize(text)
        if cjk_like:
            pieces = split_paragraph(normalized, len, zh=True)
        else:
            pieces = split_paragraph(normalized, lambda s: len(self.tokenize(s)), zh=False)
        return [p for p in pieces if not is_only_punctuation(p)]
