"""The box's pronunciation dictionary as the request path keeps it: one book under prompts/ (the data
folder that the OTA update and the output janitor leave alone), read by every engine at each text
(``Engine.pronounce_with``) and edited by the page, REST and the CLI through :class:`Pronunciations`.

The rules, formats and codes are :mod:`cosyedge.lexicon`'s (docs/pronunciation.md); this module adds
where the file lives, the free-disk check before a write, and the JSON-able answers the adapters show.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from cosyedge.config import Settings
from cosyedge.lexicon.book import FILE_NAME, MAX_ENTRIES, MAX_TSV_BYTES, PronunciationBook
from cosyedge.lexicon.matching import Lexicon, inline_marks
from cosyedge.lexicon.readings import LANGUAGES, MAX_READING_CHARS, MAX_WORD_CHARS

logger = logging.getLogger(__name__)

#: The note codes that say what the dictionary and inline readings did in an answer
#: (:class:`cosyedge.lexicon.matching.ReadingReport`).
READING_NOTES = frozenset({"reading_applied", "reading_other_language", "reading_not_supported",
                           "reading_book_damaged"})


def book_for(settings: Settings) -> PronunciationBook:
    """The dictionary of the box ``settings`` describe."""
    return PronunciationBook(settings.prompts_path / FILE_NAME)


def check_inline(text: str) -> None:
    """Refuse a text whose inline ``{word|reading}`` is bad before it is queued (ReadingError)."""
    inline_marks(text)


class Pronunciations:
    """List, add, delete, import and export entries; ``check_room(what)`` refuses a write on a
    nearly full disk (the service's guard)."""

    def __init__(self, book: PronunciationBook, check_room: Callable[[str], None] | None = None) -> None:
        self.book = book
        self._check_room = check_room or (lambda what: None)

    def lexicon(self) -> Lexicon:
        """What the engines read now (never raises: a damaged file gives its good lines)."""
        return self.book.lexicon()

    def listing(self) -> dict[str, Any]:
        """Every entry, the file's unreadable lines, where a damaged file was kept, and the limits."""
        status = self.book.status()
        return {"entries": [e.as_dict() for e in self.book.entries()], "problems": status["problems"],
                "kept_copy": status["kept_copy"], "languages": list(LANGUAGES),
                "limits": {"entries": MAX_ENTRIES, "word_chars": MAX_WORD_CHARS,
                           "reading_chars": MAX_READING_CHARS, "tsv_bytes": MAX_TSV_BYTES}}

    def add(self, language: object, word: object, reading: object) -> dict[str, Any]:
        """Add or replace one entry; the stored entry and whether it replaced one."""
        self._check_room("the pronunciation dictionary")
        entry, replaced = self.book.add(language, word, reading)
        logger.info("pronunciation %s %r -> %r (%s)", entry.language, entry.word, entry.reading.text,
                    "replaced" if replaced else "added")
        return {"entry": entry.as_dict(), "replaced": replaced}

    def delete(self, language: object, word: object) -> dict[str, Any]:
        entry = self.book.delete(language, word)
        logger.info("pronunciation %s %r deleted", entry.language, entry.word)
        return {"deleted": entry.as_dict()}

    def import_tsv(self, data: bytes) -> dict[str, Any]:
        """Add or replace the entries of a TSV; its bad lines are listed, its good ones kept."""
        self._check_room("the pronunciation dictionary")
        report = self.book.import_tsv(data)
        logger.info("pronunciations imported: %d added, %d replaced, %d line(s) refused", report.added,
                    report.replaced, len(report.problems))
        return report.as_dict()

    def export_tsv(self) -> str:
        return self.book.export_tsv()
