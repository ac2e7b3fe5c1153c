"""How clearly a voice reads a language: synthesize, transcribe offline, score by pronunciation.

Scoring compares what was said with what the listener (``cosyedge.listening.asr``) heard as sounds, not as
spelling, so script and numeral choices of the recognizer do not count as errors:

- Chinese: toned pinyin syllables (pypinyin, neutral tone as 5), after numbers, dates and symbols
  are read out by the embedded engine's own normalizer (``2025年`` and ``二零二五年`` are the same)
  and traditional characters (Whisper writes them often) are made simplified (OpenCC ``tw2sp``), so
  pypinyin's phrase readings apply to both sides alike. 一 and 不 change tone with their neighbours
  (sandhi) and pypinyin marks that only for some phrases, so their tone is not scored. English
  words inside a Chinese line are not scored: the listener writes them in Latin letters or as a
  Chinese transliteration (apple as 阿波) at random; the syllables around them are.
- Japanese: the katakana reading of each side (OpenJTalk), one unit per kana.
- English: words, lower case, after the same normalizer reads numbers out (a time written ``8.30``
  is read as ``8:30``).

The error rate is the edit distance over the reference's length (substitutions, deletions and
insertions), summed over sentences. The bench (``bench/intelligibility.py``) runs this over the
committed sentence set for every preset, and the presets' test checks the committed results with it.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

logger = logging.getLogger(__name__)


_HAN_RUN = re.compile(r"([\u3400-\u9fff\uf900-\ufaff]+)")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_KANA = re.compile(r"[\u30a1-\u30fa\u30fc]")


@dataclass(frozen=True)
class Score:
    """Errors against the reference's units (syllables, kana or words) for one or more sentences."""

    errors: int
    units: int

    @property
    def rate(self) -> float:
        return self.errors / self.units if self.units else 0.0

    def __add__(self, other: "Score") -> "Score":
        return Score(self.errors + other.errors, self.units + other.units)


_CLOCK = re.compile(r"\b(\d{1,2})\.(\d{2})\b")
#: Characters whose tone follows their neighbours (sandhi): scored without the tone.
_SANDHI = {"一": "yi", "不": "bu"}


@functools.lru_cache(maxsize=1)
def _simplifier() -> Any:
    import opencc

    return opencc.OpenCC("tw2sp")


def _spoken(text: str, language: str) -> str:
    from cosyedge.text.normalize import normalize

    text = unicodedata.normalize("NFKC", text)
    if language == "zh":
        text = _simplifier().convert(text)
    elif language == "en":
        text = _CLOCK.sub(r"\1:\2", text)
    return normalize(text, language)


def _syllables(han: str) -> list[str]:
    """Toned pinyin of a run of Chinese characters, one syllable each (sandhi characters untoned)."""
    from pypinyin import Style, lazy_pinyin

    readings = lazy_pinyin(han, style=Style.TONE3, neutral_tone_with_five=True, errors=lambda s: list(s))
    return [_SANDHI.get(char, reading) for char, reading in zip(han, readings)]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " ").replace("’", "'"))


def pronunciation(text: str, language: str) -> list[str]:
    """The units a sentence is scored in: toned pinyin + words (zh), kana (ja), words (en)."""
    if language == "ja":
        import pyopenjtalk

        return _KANA.findall(pyopenjtalk.g2p(unicodedata.normalize("NFKC", text), kana=True))
    spoken = _spoken(text, language)
    if language == "en":
        return _words(spoken)
    if language != "zh":
        raise ValueError(f"no pronunciation scoring for {language!r}")
    return [unit for piece in _HAN_RUN.findall(spoken) for unit in _syllables(piece)]


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two unit sequences."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def score(reference: str, heard: str, language: str) -> Score:
    """Errors of ``heard`` against ``reference``, in the language's pronunciation units."""
    ref = pronunciation(reference, language)
    return Score(edit_distance(ref, pronunciation(heard, language)), len(ref))
