"""The pronunciation dictionary and inline readings in Kokoro's one text pass.

:class:`ReadingPass` is made once per text by the frontend. Before language tagging,
:meth:`~ReadingPass.mark_inline` turns each inline ``{word|reading}`` into the word followed by a
private marker (a neutral character, so it joins the word's own language run). Then, for each
language run, :meth:`~ReadingPass.atomize` replaces every occurrence that gets a reading (the
inline ones first, then the dictionary's, longest first) by one private *atom* character that
normalization, clause splitting and word cutting pass through untouched; the G2P step reads an
atom as its reading's Kokoro symbols (:meth:`KokoroG2P.reading`) and shows it as the word it
replaced (:meth:`~ReadingPass.surface`). An entry that meets a run of another language, or whose
reading has symbols Kokoro lacks, is left to the G2P and noted (:class:`ReadingReport`).

Private-use characters cannot come from the text itself: cleanup removes them first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from cosyedge.lexicon.entries import Entry, key
from cosyedge.lexicon.matching import Lexicon, Match, ReadingReport, inline_marks, outside

#: Inline markers (one per inline reading, after its word) and atoms (one per occurrence read).
MARK_BASE, ATOM_BASE = 0xE000, 0xF0000
MAX_MARKS, MAX_ATOMS = 0x1000, 0xFFFD
_MARK = re.compile(f"[{chr(MARK_BASE)}-{chr(MARK_BASE + MAX_MARKS - 1)}]")
_ATOM = re.compile(f"[{chr(ATOM_BASE)}-{chr(ATOM_BASE + MAX_ATOMS - 1)}]")
_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese"}


@dataclass(frozen=True)
class Atom:
    """One occurrence read from a reading: what the text showed, and the symbols it is read as."""

    surface: str
    phonemes: str


class ReadingPass:
    """One text's readings: ``symbols(reading) -> (Kokoro symbols, symbols outside the vocabulary)``."""

    def __init__(self, lexicon: Lexicon, symbols: Callable, engine: str = "kokoro") -> None:  # noqa: ANN001
        self.lexicon = lexicon
        self._symbols = symbols
        self.report = ReadingReport(engine)
        self._inline: list[Entry] = []
        self._atoms: list[Atom] = []
        self._cache: dict[Entry, tuple[str, list[str]]] = {}

    @property
    def active(self) -> bool:
        return bool(self._inline) or len(self.lexicon) > 0

    def mark_inline(self, text: str) -> str:
        """``text`` with each inline ``{word|reading}`` as ``word`` + its marker (a bad reading raises
        its coded ReadingError, naming the word)."""
        marks = inline_marks(text)
        if not marks:
            return text
        out, pos = [], 0
        for mark in marks[:MAX_MARKS]:
            out.append(text[pos:mark.start])
            out.append(mark.entry.word + chr(MARK_BASE + len(self._inline)))
            self._inline.append(mark.entry)
            pos = mark.end
        out.append(text[pos:])
        return "".join(out)

    def atomize(self, text: str, language: str) -> str:
        """One language run: every occurrence with a reading in ``language`` as an atom; inline
        markers removed; entries of other languages noted where they meet this run."""
        if not self.active:
            return text
        taken: list[Match] = []
        plain = []  # the run without markers, and where each inline occurrence sits in it
        for piece in re.split(f"({_MARK.pattern})", text):
            if piece and _MARK.fullmatch(piece):
                entry = self._inline[ord(piece) - MARK_BASE]
                end = sum(len(p) for p in plain)
                start = end - len(entry.word)
                if start >= 0 and key("".join(plain)[start:end], entry.language) == key(entry.word, entry.language):
                    if entry.language == language:
                        taken.append(Match(start, end, entry))
                    else:
                        self.report.other_language(entry, _NAMES[language])
                continue
            plain.append(piece)
        text = "".join(plain)
        found = taken + outside(self.lexicon.find(text, language), taken)
        for other in self.lexicon.languages() - {language}:
            for match in outside(self.lexicon.find(text, other), found):
                self.report.other_language(match.entry, _NAMES[language])
        out, pos = [], 0
        for match in sorted(found, key=lambda m: m.start):
            atom = self._atom(text[match.start:match.end], match.entry, inline=match in taken)
            out.append(text[pos:match.start])
            out.append(atom if atom is not None else text[match.start:match.end])
            pos = match.end
        out.append(text[pos:])
        return "".join(out)

    def _atom(self, surface: str, entry: Entry, inline: bool) -> str | None:
        if entry not in self._cache:
            self._cache[entry] = self._symbols(entry.reading)
        phonemes, unknown = self._cache[entry]
        if unknown or not phonemes or len(self._atoms) >= MAX_ATOMS:
            if unknown:
                self.report.not_supported(entry, f"Kokoro has no symbol for {' '.join(unknown)}")
            return None
        self.report.apply(entry, inline)
        self._atoms.append(Atom(surface, phonemes))
        return chr(ATOM_BASE + len(self._atoms) - 1)

    def split(self, text: str) -> list[tuple[str, Atom | None]]:
        """``text`` as plain pieces and atoms, in order: (piece, None) or (atom's surface, atom)."""
        out: list[tuple[str, Atom | None]] = []
        for piece in re.split(f"({_ATOM.pattern})", text):
            if not piece:
                continue
            if _ATOM.fullmatch(piece):
                atom = self._atoms[ord(piece) - ATOM_BASE]
                out.append((atom.surface, atom))
            else:
                out.append((piece, None))
        return out

    def surface(self, text: str) -> str:
        """``text`` with its atoms shown as the words they replaced (for display and captions)."""
        if not self._atoms:
            return text
        return _ATOM.sub(lambda m: self._atoms[ord(m.group()) - ATOM_BASE].surface, text)
