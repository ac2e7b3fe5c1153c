"""The pronunciation dictionary and inline readings in CosyVoice's text pass.

CosyVoice's text is normalized and split as upstream does it (``text_normalize``); the readings go in
after that, into each normalized sentence, so the normalization and the split lengths stay
upstream's. An inline ``{word|reading}`` is first turned into its word followed by a private marker
(wetext and the split pass it through), so its one occurrence is found again after the split.

How an entry is read depends on the version (its description's ``spell_reading``):

* **Fun-CosyVoice3** takes phones inline (upstream's pronunciation inpainting, ace7c47's example
  ``报道[j][ǐ]予``): a Mandarin word becomes its pinyin initials and tone-marked finals
  (``银行`` -> ``[y][ín][h][áng]``), an English word its ARPAbet phones (``[N][IY1][S]``), a Japanese
  word its kana as katakana. A syllable without a phone token falls back to a homophone (below).
* **CosyVoice2 and CosyVoice-300M** take no phones. A Mandarin character whose only reading is the
  entry's is kept; another is replaced by the commonest character whose *only* reading is the
  entry's syllable (``行`` hang2 -> ``杭``), so the model has nothing to choose. A Japanese entry is
  read as its kana. English phones cannot be given: such an entry is not applied, and noted.

The sentence the LLM reads is :class:`Spoken` (a ``str``) and keeps the text as written in
``display``, which the chunk (and so the captions) shows.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from typing import Callable, Collection

from cosyedge.lexicon.entries import Entry, key
from cosyedge.lexicon.matching import Lexicon, Match, ReadingReport, inline_marks, outside
from cosyedge.lexicon.readings import initial_final, is_han, is_kana, marked_final

logger = logging.getLogger(__name__)

MARK_BASE, MAX_MARKS = 0xE000, 0x1000
_MARK = re.compile(f"[{chr(MARK_BASE)}-{chr(MARK_BASE + MAX_MARKS - 1)}]")
_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese"}
#: ``spell(entry) -> (what the LLM reads instead of the word, or None; why not, in words)``.
Speller = Callable[[Entry], "tuple[str | None, str]"]


class Spoken(str):
    """A sentence as the LLM reads it (the string) that remembers how it is shown (``display``)."""

    display: str

    def __new__(cls, spoken: str, display: str) -> "Spoken":
        made = super().__new__(cls, spoken)
        made.display = display
        return made

    def __reduce__(self) -> tuple:
        return Spoken, (str(self), self.display)


def shown(sentence: str) -> str:
    """How a sentence of the analysis is shown (its text as written)."""
    return getattr(sentence, "display", sentence)


class CosyReadingPass:
    """One text's readings for a CosyVoice engine named ``engine`` with the version's ``spell``."""

    def __init__(self, lexicon: Lexicon, spell: Speller, engine: str) -> None:
        self.lexicon = lexicon
        self._spell = functools.lru_cache(maxsize=None)(spell)
        self.report = ReadingReport(engine)
        self._inline: list[Entry] = []

    def mark_inline(self, text: str) -> str:
        """``text`` with each inline ``{word|reading}`` as its word + a marker (a bad reading raises
        its coded ReadingError)."""
        out, pos = [], 0
        for mark in inline_marks(text)[:MAX_MARKS]:
            out += [text[pos:mark.start], mark.entry.word, chr(MARK_BASE + len(self._inline))]
            self._inline.append(mark.entry)
            pos = mark.end
        return "".join(out) + text[pos:] if out else text

    def apply(self, sentence: str) -> str:
        """One normalized sentence: each occurrence with a reading spelled for the LLM (a
        :class:`Spoken`), the markers gone; the sentence itself when nothing applies."""
        if not self._inline and not len(self.lexicon):
            return sentence
        display, taken = self._unmark(sentence)
        han = "ja" if any(is_kana(ch) for ch in display) else "zh"
        found = [m for m in taken if m.entry.language in (han, "en")]
        for match in taken:
            if match.entry.language not in (han, "en"):
                self.report.other_language(match.entry, _NAMES[han])
        for language in (han, "en"):
            found += outside(self.lexicon.find(display, language), found)
        other = "zh" if han == "ja" else "ja"
        for match in outside(self.lexicon.find(display, other), found):
            self.report.other_language(match.entry, _NAMES[han])
        spoken, pos = [], 0
        for match in sorted(found, key=lambda m: m.start):
            spelled, why = self._spell(match.entry)
            if spelled is None:
                self.report.not_supported(match.entry, why)
                continue
            self.report.apply(match.entry, inline=match in taken)
            spoken += [display[pos:match.start], spelled]
            pos = match.end
        if not spoken:
            return display
        return Spoken("".join(spoken) + display[pos:], display)

    def _unmark(self, sentence: str) -> tuple[str, list[Match]]:
        """The sentence without markers, and each inline occurrence found in it."""
        display, taken = "", []
        for piece in re.split(f"({_MARK.pattern})", sentence):
            if not _MARK.fullmatch(piece or "x"):
                display += piece
                continue
            entry = self._inline[ord(piece) - MARK_BASE]
            start = len(display) - len(entry.word)
            if start >= 0 and key(display[start:], entry.language) == key(entry.word, entry.language):
                taken.append(Match(start, len(display), entry))
            else:
                self.report.not_supported(entry, "the text normalization changed the word before it")
        return display, taken


# --- spellings ------------------------------------------------------------------------------------


def katakana(kana: str) -> str:
    """Hiragana as katakana (what Fun-CosyVoice3 reads best, upstream says); katakana stays."""
    return "".join(chr(ord(ch) + 0x60) if "\u3041" <= ch <= "\u3096" else ch for ch in kana)


def homophone_spelling(entry: Entry) -> tuple[str | None, str]:
    """The closest faithful spelling for a model that takes no phones (module docstring)."""
    if entry.language == "ja":
        return entry.reading.kana, ""
    if entry.language == "en":
        return None, "this model takes no phonemes, and English has no unambiguous respelling"
    chars = []
    for char, syllable in zip(entry.word, entry.reading.syllables):
        spelled = same_sound(char, syllable)
        if spelled is None:
            return None, f"no character reads only {syllable} for {char}"
        chars.append(spelled)
    return "".join(chars), ""


def phone_spelling(entry: Entry, tokens: Collection[str]) -> tuple[str | None, str]:
    """Fun-CosyVoice3's inline phones for ``entry`` (``tokens``: its tokenizer's phone tokens)."""
    if entry.language == "ja":
        return katakana(entry.reading.kana), ""
    if entry.language == "en":
        phones = [f"[{p}]" for p in entry.reading.phones]
        missing = [p for p in phones if p not in tokens]
        return (None, f"no phone token for {' '.join(missing)}") if missing else ("".join(phones), "")
    out = []
    for char, syllable in zip(entry.word, entry.reading.syllables):
        initial, final, tone = initial_final(syllable)
        phones = ([f"[{initial}]"] if initial else []) + [f"[{marked_final(final, tone)}]"]
        if all(p in tokens for p in phones):
            out.append("".join(phones))
            continue
        spelled = same_sound(char, syllable)  # no phone token for this syllable: a homophone instead
        if spelled is None:
            return None, f"no phone token and no homophone for {syllable}"
        out.append(spelled)
    return "".join(out), ""


def same_sound(char: str, syllable: str) -> str | None:
    """``char`` when its only reading is ``syllable``, else the commonest character whose only
    reading is ``syllable``; None when there is none."""
    if not is_han(char):
        return None
    readings = character_readings().get(char)
    if readings == (syllable,):
        return char
    return unambiguous_characters().get(syllable)


@functools.lru_cache(maxsize=1)
def character_readings() -> dict[str, tuple[str, ...]]:
    """Every character's readings as numbered syllables (pypinyin's table; loaded once, ~2 s)."""
    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.pinyin_dict import pinyin_dict

    table = {}
    for code, readings in pinyin_dict.items():
        table[chr(code)] = tuple(dict.fromkeys(to_tone3(r, neutral_tone_with_five=True).replace("ü", "v")
                                               for r in readings.split(",")))
    return table


@functools.lru_cache(maxsize=1)
def unambiguous_characters() -> dict[str, str]:
    """Syllable -> the commonest character (jieba's single-character frequency) with only that reading."""
    with warnings.catch_warnings():  # jieba's first import pulls in the deprecated pkg_resources
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary loading logs at DEBUG through its own handler
    jieba.dt.check_initialized()
    frequency = jieba.dt.FREQ
    best: dict[str, tuple[int, str]] = {}
    for char, readings in character_readings().items():
        if len(readings) != 1 or not is_han(char):
            continue
        count = frequency.get(char, 0)
        if count and count > best.get(readings[0], (0, ""))[0]:
            best[readings[0]] = (count, char)
    return {syllable: char for syllable, (_, char) in best.items()}
