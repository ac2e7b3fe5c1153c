"""A dictionary entry: a checked word of one language and its parsed reading.

The word is folded the way every text is before it is read (:func:`cosyedge.text.cleanup.clean`:
full-width letters narrowed, control characters out, spaces collapsed), and English words are
matched without regard to case (:func:`key`). A word must be written in its language's script:
Mandarin in Chinese characters, English in Latin letters (spaces, apostrophes and hyphens between
them), Japanese in kana and kanji.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from cosyedge.errors import ReadingError
from cosyedge.lexicon.readings import (LANGUAGE_NAMES, LANGUAGES, MAX_WORD_CHARS, Reading, check_characters, is_han,
                                       is_kana, parse_reading, about)
from cosyedge.text.cleanup import clean

_ENGLISH_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+(?:[ '\-][A-Za-z\u00c0-\u024f]+)*")


@dataclass(frozen=True)
class Entry:
    """``word`` (folded, as matched) read as ``reading`` in ``language``."""

    language: str
    word: str
    reading: Reading

    @property
    def key(self) -> tuple[str, str]:
        """What makes two entries the same entry: the language and the word as matched."""
        return self.language, key(self.word, self.language)

    def as_dict(self) -> dict[str, str]:
        return {"language": self.language, "word": self.word, "reading": self.reading.text}


def key(word: str, language: str) -> str:
    """The form a word is matched in: English ignores case, the others are matched as written."""
    return word.lower() if language == "en" else word


def fold(word: str) -> str:
    """A word as text reaches the matcher (the same cleanup every engine runs first)."""
    return clean(unicodedata.normalize("NFC", word))


def check_word(language: str, word: object) -> str:
    """The folded word, or a coded refusal (empty, too long, invisible characters, punctuation,
    not written in the language's script)."""
    if not isinstance(word, str) or not word.strip():
        raise ReadingError(about(str(word or ""), "the word is empty: type the word to be read"),
                           code="reading_word_empty", word=str(word or ""))
    check_characters(word.strip(), "word", word.strip())
    folded = fold(word)
    if not folded:
        raise ReadingError(about(word, "the word is empty: type the word to be read"),
                           code="reading_word_empty", word=word)
    if len(folded) > MAX_WORD_CHARS:
        raise ReadingError(about(folded[:MAX_WORD_CHARS], f"the word is {len(folded)} characters; the limit is "
                                                          f"{MAX_WORD_CHARS}"),
                           code="reading_word_too_long", word=folded[:MAX_WORD_CHARS], length=len(folded),
                           limit=MAX_WORD_CHARS)
    if language not in LANGUAGES:
        raise ReadingError(about(folded, f"language {language!r} is not one the dictionary holds "
                                         f"({', '.join(LANGUAGES)})"),
                           code="reading_language_unknown", word=folded, language=language)
    if not _in_script(folded, language):
        raise ReadingError(about(folded, f"a {LANGUAGE_NAMES[language]} word is written "
                                         f"{_SCRIPT_WORDS[language]}"),
                           code="reading_word_script", word=folded, language=language)
    return folded


_SCRIPT_WORDS = {"zh": "in Chinese characters only", "en": "in Latin letters (with spaces, ' or - between them)",
                 "ja": "in kana and kanji only"}


def _in_script(word: str, language: str) -> bool:
    if language == "zh":
        return all(is_han(ch) for ch in word)
    if language == "ja":
        return all(is_han(ch) or is_kana(ch) for ch in word)
    return _ENGLISH_WORD.fullmatch(word) is not None


def make_entry(language: object, word: object, reading: object) -> Entry:
    """A checked entry, or a :class:`~cosyedge.errors.ReadingError` naming the word and what is wrong."""
    language = str(language or "").strip().lower()
    folded = check_word(language, word)
    return Entry(language, folded, parse_reading(language, reading if isinstance(reading, str) else "", folded))


def guess_language(word: str, reading: str) -> str:
    """The language of an inline reading: kana in the word or the reading makes it Japanese,
    Chinese characters Mandarin, anything else English."""
    if any(is_kana(ch) for ch in word + reading):
        return "ja"
    if any(is_han(ch) for ch in word):
        return "zh"
    return "en"
