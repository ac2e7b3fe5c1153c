"""The box's pronunciation dictionary on disk: one human-readable TSV, written atomically.

The file (``prompts/pronunciations.tsv``: under the data folder that the OTA update and the output
janitor never touch) is what :func:`export_tsv` writes and :meth:`PronunciationBook.import_tsv`
reads: comment lines starting with ``#``, then one entry a line, ``language<TAB>word<TAB>reading``.

A damaged file never stops synthesis: :meth:`PronunciationBook.lexicon` keeps every good line and
lists the bad ones (the engines note them in their answers). Nothing the teacher saved is lost: the
first write over a file with bad lines first keeps a copy of it whole (``pronunciations.tsv.damaged-
<time>``), and the listing says where. Writes are serialized and atomic
(:func:`cosyedge.files.write_atomic`); the file is re-read when another process changed it.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cosyedge.errors import NotFoundError, PayloadTooLargeError, ReadingError
from cosyedge.files import write_atomic
from cosyedge.lexicon.entries import Entry, check_word, key, make_entry
from cosyedge.lexicon.matching import Lexicon, LineProblem

logger = logging.getLogger(__name__)

FILE_NAME = "pronunciations.tsv"
#: Entries a dictionary may hold, and the largest TSV accepted for import.
MAX_ENTRIES = 5000
MAX_TSV_BYTES = 1_000_000
HEADER = ("# cosyedge pronunciation dictionary: one entry a line, language<TAB>word<TAB>reading\n"
          "# zh: toned pinyin, one syllable per character (银行\tyin2 hang2); en: IPA (/niːs/) or ARPAbet "
          "(N IY1 S); ja: kana\n")


@dataclass(frozen=True)
class ImportReport:
    """What an import did: entries added and replaced, and the lines it could not use."""

    added: int
    replaced: int
    problems: tuple[LineProblem, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"added": self.added, "replaced": self.replaced, "problems": [p.as_dict() for p in self.problems]}


def parse_tsv(text: str) -> tuple[list[Entry], list[LineProblem]]:
    """Entries of a TSV (this module's format; a ``language word reading`` header line is skipped)
    and every line that could not be used, with its number and the coded reason."""
    entries: list[Entry] = []
    problems: list[LineProblem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != 3:
            problems.append(LineProblem(number, line[:200], "reading_tsv_columns",
                                        f"line {number} has {len(cells)} column(s); an entry is "
                                        "language<TAB>word<TAB>reading"))
            continue
        if number == 1 and [c.strip().lower() for c in cells] == ["language", "word", "reading"]:
            continue
        try:
            entries.append(make_entry(cells[0], cells[1], cells[2]))
        except ReadingError as exc:
            problems.append(LineProblem(number, line[:200], exc.code, exc.message))
    return entries, problems


def export_tsv(entries: list[Entry]) -> str:
    """The dictionary file's text for ``entries`` (sorted by language, then word)."""
    lines = [f"{e.language}\t{e.word}\t{e.reading.text}\n"
             for e in sorted(entries, key=lambda e: (e.language, key(e.word, e.language)))]
    return HEADER + "".join(lines)


@dataclass
class _Loaded:
    stamp: tuple[int, int] | None
    lexicon: Lexicon
    damaged: bool = False  # the file as it is on disk has lines (or bytes) that were not used


class PronunciationBook:
    """The dictionary file at ``path``: read on demand (cheap when unchanged), edited under a lock."""

    def __init__(self, path: Path, clock=time.time) -> None:  # noqa: ANN001 - a test seam
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._loaded = _Loaded(stamp=None, lexicon=Lexicon())
        self._kept_copy: Path | None = None

    # -- reading --------------------------------------------------------------------------------
    def lexicon(self) -> Lexicon:
        """The entries now on disk (re-read when the file changed); never raises: an unreadable
        file gives no entries and one listed problem."""
        with self._lock:
            return self._refresh().lexicon

    def entries(self) -> list[Entry]:
        return sorted(self.lexicon().entries, key=lambda e: (e.language, key(e.word, e.language)))

    def status(self) -> dict[str, object]:
        """Counts, the file's unreadable lines and where a damaged file's copy was kept."""
        with self._lock:
            loaded = self._refresh()
        return {"path": str(self.path), "entries": len(loaded.lexicon),
                "problems": [p.as_dict() for p in loaded.lexicon.problems],
                "kept_copy": str(self._kept_copy) if self._kept_copy else None}

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _refresh(self) -> _Loaded:
        stamp = self._stamp()
        if stamp == self._loaded.stamp:
            return self._loaded
        if stamp is None:
            self._loaded = _Loaded(stamp=None, lexicon=Lexicon())
            return self._loaded
        try:
            data = self.path.read_bytes()
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            problem = LineProblem(0, "", "reading_tsv_not_utf8", f"the dictionary file is not UTF-8 text "
                                  f"(byte {exc.start}); it was skipped and is kept as it is")
            logger.warning("pronunciation dictionary %s: %s", self.path, problem.message)
            self._loaded = _Loaded(stamp=stamp, lexicon=Lexicon(problems=[problem]), damaged=True)
            return self._loaded
        except OSError as exc:
            problem = LineProblem(0, "", "reading_file_unreadable", f"the dictionary file cannot be read ({exc})")
            logger.warning("pronunciation dictionary %s: %s", self.path, problem.message)
            self._loaded = _Loaded(stamp=stamp, lexicon=Lexicon(problems=[problem]), damaged=True)
            return self._loaded
        entries, problems = parse_tsv(text)
        if problems:
            logger.warning("pronunciation dictionary %s: %d unreadable line(s) skipped (first: line %d, %s)",
                           self.path, len(problems), problems[0].line, problems[0].code)
        self._loaded = _Loaded(stamp=stamp, lexicon=Lexicon(entries, problems), damaged=bool(problems))
        return self._loaded

    # -- writing --------------------------------------------------------------------------------
    def add(self, language: object, word: object, reading: object) -> tuple[Entry, bool]:
        """Add or replace the entry for ``word`` in ``language``; (the entry, whether it replaced one)."""
        entry = make_entry(language, word, reading)
        with self._lock:
            current = {e.key: e for e in self._refresh().lexicon.entries}
            replaced = entry.key in current
            if not replaced and len(current) >= MAX_ENTRIES:
                raise ReadingError(f"the pronunciation dictionary holds {MAX_ENTRIES} entries, its limit; delete "
                                   "some first", code="reading_book_full", limit=MAX_ENTRIES)
            current[entry.key] = entry
            self._write(list(current.values()))
        return entry, replaced

    def delete(self, language: object, word: object) -> Entry:
        """Remove the entry for ``word`` in ``language`` (NotFoundError when there is none)."""
        language = str(language or "").strip().lower()
        folded = check_word(language, word)
        with self._lock:
            current = {e.key: e for e in self._refresh().lexicon.entries}
            entry = current.pop((language, key(folded, language)), None)
            if entry is None:
                raise NotFoundError(f"the pronunciation dictionary has no {language} entry {folded!r}",
                                    code="reading_entry_unknown", word=folded, language=language)
            self._write(list(current.values()))
        return entry

    def import_tsv(self, data: bytes) -> ImportReport:
        """Add or replace the entries of an uploaded TSV; its bad lines are listed, its good ones kept."""
        if len(data) > MAX_TSV_BYTES:
            raise PayloadTooLargeError(f"the TSV is {len(data) / 1e6:.1f} MB; the limit is "
                                       f"{MAX_TSV_BYTES / 1e6:.1f} MB", code="reading_tsv_too_large",
                                       size=len(data), limit=MAX_TSV_BYTES)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ReadingError(f"the TSV is not UTF-8 text (byte {exc.start}); save it as UTF-8 and import it "
                               "again", code="reading_tsv_not_utf8", offset=exc.start) from None
        entries, problems = parse_tsv(text)
        with self._lock:
            current = {e.key: e for e in self._refresh().lexicon.entries}
            added = replaced = 0
            for entry in entries:
                if entry.key in current:
                    replaced += 1
                elif len(current) >= MAX_ENTRIES:
                    problems.append(LineProblem(0, entry.word, "reading_book_full",
                                                f"{entry.word!r} not added: the dictionary holds "
                                                f"{MAX_ENTRIES} entries, its limit"))
                    continue
                else:
                    added += 1
                current[entry.key] = entry
            if added or replaced:
                self._write(list(current.values()))
        return ImportReport(added, replaced, tuple(problems))

    def export_tsv(self) -> str:
        """The dictionary as TSV (the file's own format)."""
        return export_tsv(list(self.lexicon().entries))

    def _write(self, entries: list[Entry]) -> None:
        """Write the file atomically (the lock is held); a damaged file is first kept whole."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._loaded.damaged and self.path.exists():
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
            copy = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
            shutil.copy2(self.path, copy)
            self._kept_copy = copy
            logger.warning("pronunciation dictionary %s had unreadable lines: kept whole as %s", self.path, copy)
        write_atomic(self.path, export_tsv(entries).encode("utf-8"), suffix=".tsv", mode=0o644)
        self._loaded = _Loaded(stamp=self._stamp(), lexicon=Lexicon(entries))
