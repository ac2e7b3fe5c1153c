"""Finding pronunciation entries in a text, and the answer's account of what was applied.

Rules (docs/pronunciation.md says them for people; tests/lexicon/test_matching.py checks each):

* **Longest match first.** Scanning from the left, the longest entry that matches at a position
  wins (``银行业`` before ``银行`` before ``行``); matches never overlap.
* **Folding.** Entries and text are compared after the same cleanup (full-width letters narrowed,
  :func:`cosyedge.lexicon.entries.fold`); English ignores case and matches whole words only (no
  letter or digit right before or after), Mandarin and Japanese match anywhere.
* **Languages.** An entry applies only where the text around it is read in the entry's language;
  where it meets text read in another language (a tag, or kana making Chinese characters Japanese)
  it is not applied and the answer says so (``reading_other_language``).
* **Inline form.** ``{word|reading}`` in the text gives that one occurrence its reading (its language
  from the scripts: kana -> Japanese, Chinese characters -> Mandarin, else English); it wins over the
  dictionary. Braces and bars may be full-width. Square brackets stay free for language tags
  (``[zh]``) and CosyVoice's own marks.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from cosyedge.lexicon.entries import Entry, guess_language, key, make_entry
from cosyedge.notes import Note

#: The inline form: ``{word|reading}`` (ASCII or full-width braces and bar).
INLINE = re.compile(r"[{｛]([^{}｛｝|｜\n]{1,40})[|｜]([^{}｛｝|｜\n]{1,200})[}｝]")
#: At most this many entries are named in one "applied" note (the rest are counted).
NOTE_ENTRIES = 12


@dataclass(frozen=True)
class Match:
    """``entry`` found at ``text[start:end]``."""

    start: int
    end: int
    entry: Entry


@dataclass(frozen=True)
class LineProblem:
    """A line of the dictionary file (or an imported TSV) that could not be used, and why."""

    line: int
    text: str
    code: str
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"line": self.line, "text": self.text, "code": self.code, "message": self.message}


def inline_marks(text: str) -> list[Match]:
    """Every inline ``{word|reading}`` of ``text`` (spans of the whole mark), each checked: a bad one
    raises its :class:`~cosyedge.errors.ReadingError`, naming the word."""
    marks = []
    for found in INLINE.finditer(text):
        word, reading = found.group(1).strip(), found.group(2).strip()
        entry = make_entry(guess_language(word, reading), word, reading)
        marks.append(Match(found.start(), found.end(), entry))
    return marks


class Lexicon:
    """An immutable set of entries (one per language and word) with the file's unreadable lines."""

    def __init__(self, entries: Iterable[Entry] = (), problems: Sequence[LineProblem] = ()) -> None:
        unique: dict[tuple[str, str], Entry] = {}
        for entry in entries:
            unique[entry.key] = entry
        self.entries: tuple[Entry, ...] = tuple(unique.values())
        self.problems: tuple[LineProblem, ...] = tuple(problems)
        # (language, first character as matched) -> entries starting with it, longest first
        self._starts: dict[tuple[str, str], list[Entry]] = {}
        for entry in sorted(self.entries, key=lambda e: -len(e.word)):
            self._starts.setdefault((entry.language, key(entry.word[0], entry.language)), []).append(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def languages(self) -> set[str]:
        return {entry.language for entry in self.entries}

    def find(self, text: str, language: str) -> list[Match]:
        """The entries of ``language`` in ``text``: leftmost-longest, not overlapping."""
        matches: list[Match] = []
        if not any(lang == language for lang, _ in self._starts):
            return matches
        i = 0
        while i < len(text):
            found = self._at(text, i, language)
            if found is None:
                i += 1
                continue
            matches.append(found)
            i = found.end
        return matches

    def _at(self, text: str, i: int, language: str) -> Match | None:
        for entry in self._starts.get((language, key(text[i], language)), ()):
            end = i + len(entry.word)
            if key(text[i:end], language) != key(entry.word, language):
                continue
            if language == "en" and (_word_char(text, i - 1) or _word_char(text, end)):
                continue
            return Match(i, end, entry)
        return None


def _word_char(text: str, i: int) -> bool:
    return 0 <= i < len(text) and text[i].isalnum()


def outside(matches: Iterable[Match], taken: Sequence[Match]) -> list[Match]:
    """The matches that overlap none of ``taken``."""
    return [m for m in matches if not any(m.start < t.end and t.start < m.end for t in taken)]


@dataclass
class ReadingReport:
    """What one text pass did with the dictionary and the inline readings, for the answer's notes."""

    engine: str
    applied: Counter = field(default_factory=Counter)  # (entry, inline) -> occurrences
    unapplied: dict[tuple[str, str, str], Note] = field(default_factory=dict)  # one note per word and why

    def apply(self, entry: Entry, inline: bool = False) -> None:
        self.applied[(entry, inline)] += 1

    def other_language(self, entry: Entry, read_as: str) -> None:
        """``entry`` met text read in ``read_as``: not applied there."""
        self.unapplied.setdefault((entry.word, entry.language, "other"), Note(
            f"pronunciation of {entry.word!r} ({entry.language}) not applied: the text around it is read as "
            f"{read_as}", code="reading_other_language", word=entry.word, language=entry.language,
            read_as=read_as))

    def not_supported(self, entry: Entry, why: str) -> None:
        """The engine cannot honour ``entry``'s reading (``why``: what it lacks, in words)."""
        self.unapplied.setdefault((entry.word, entry.language, "engine"), Note(
            f"pronunciation of {entry.word!r} ({entry.reading.text}) not applied: {why}",
            code="reading_not_supported", word=entry.word, language=entry.language, reading=entry.reading.text,
            engine=self.engine, why=why))

    def notes(self, lexicon: Lexicon | None = None) -> list[Note]:
        """One line naming what was applied, one per entry not applied, and one for a damaged file."""
        notes: list[Note] = []
        if self.applied:
            named = [{"word": entry.word, "reading": entry.reading.text, "count": count, "inline": inline}
                     for (entry, inline), count in self.applied.items()]
            shown = ", ".join(f"{n['word']} -> {n['reading']}" + (f" (x{n['count']})" if n["count"] > 1 else "")
                              + (" (inline)" if n["inline"] else "") for n in named[:NOTE_ENTRIES])
            more = f" and {len(named) - NOTE_ENTRIES} more" if len(named) > NOTE_ENTRIES else ""
            notes.append(Note(f"pronunciations applied: {shown}{more}", code="reading_applied",
                              entries=named, engine=self.engine))
        notes.extend(self.unapplied.values())
        if lexicon is not None and lexicon.problems:
            lines = [p.line for p in lexicon.problems]
            notes.append(Note(f"the pronunciation dictionary has {len(lines)} unreadable line(s) "
                              f"({', '.join(map(str, lines[:10]))}); they were skipped",
                              code="reading_book_damaged", lines=lines))
        return notes
