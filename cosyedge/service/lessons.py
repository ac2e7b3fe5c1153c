"""Long lessons: a .txt or .md file read aloud paragraph by paragraph, written to disk as it is made.

:func:`read_lesson` turns an uploaded file into a :class:`Lesson` (UTF-8 only, a stated length
limit, Markdown marks dropped, paragraphs cut to the engine's text limit) or refuses it with a
coded error naming the problem. :func:`synthesize_lesson` runs the engine over one paragraph at a
time and appends each piece to a WAV on disk (:class:`WavAppender`), so memory does not grow with
the lesson's length; it reports progress per paragraph with the time left, and on request cuts one
WAV per paragraph into a zip afterwards (copied from the finished WAV, not kept in memory).

Queues and the engine's lifetime are the service's business (``Service.submit_lesson``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import struct
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Sequence

import numpy as np

from cosyedge.audio import Joiner, to_pcm16
from cosyedge.engines.base import CancelFn, Engine, SynthesisOptions, TextAnalysis, VoicePrompt
from cosyedge.errors import CancelledError, PayloadTooLargeError, StorageFullError, TextError
from cosyedge.files import TEMP_PREFIX
from cosyedge.notes import Note, code_of
from cosyedge.service.captions import FORMATS, Captions, CaptionTrack
from cosyedge.service.outputs import write_captions
from cosyedge.service.pronunciations import READING_NOTES
from cosyedge.service.synthesis import check_text

logger = logging.getLogger(__name__)

#: The file kinds a lesson may come in.
LESSON_SUFFIXES = (".txt", ".md")
#: UTF-8 takes at most 4 bytes a character: a file larger than this cannot be within the limit.
BYTES_PER_CHAR = 4
#: Silence between paragraphs (a sentence pause is 0.18 s).
PARAGRAPH_PAUSE_S = 0.6
#: At most this many "not read aloud" lines (and pronunciation notes of later paragraphs,
#: ``READING_NOTES``) are kept for the report, however long the lesson.
MAX_REPORT_LINES = 20


_BLANK_LINES = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")
_CLAUSE_END = re.compile(r"(?<=[,，、:：])\s*|\s+")
# Markdown marks that are layout, not words (a lesson written in a notes app).
_MD_FENCE = re.compile(r"^\s*(```|~~~)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_MD_QUOTE = re.compile(r"^\s{0,3}(>\s?)+")
_MD_BULLET = re.compile(r"^\s*([-*+]|\d{1,3}[.)])\s+")
_MD_RULE = re.compile(r"^\s*([-*_]\s*){3,}$")
_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_MD_EMPHASIS = re.compile(r"(\*\*|__|\*|_|~~|`)(?=\S)(.+?)(?<=\S)\1")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")


@dataclass(frozen=True)
class Lesson:
    """A lesson ready to read: its paragraphs in order, each within the engine's text limit."""

    name: str  # the file's name without its suffix
    paragraphs: tuple[str, ...]

    @property
    def chars(self) -> int:
        return sum(len(p) for p in self.paragraphs)


def max_lesson_bytes(max_chars: int) -> int:
    """The largest file that can hold ``max_chars`` characters (a UTF-8 BOM included)."""
    return max_chars * BYTES_PER_CHAR + 3


def check_lesson_size(size: int, max_chars: int) -> None:
    """Refuse a file too large to be a lesson before reading it (PayloadTooLargeError)."""
    limit = max_lesson_bytes(max_chars)
    if size > limit:
        raise PayloadTooLargeError(
            f"the lesson file is {size / 1e6:.1f} MB; a lesson may have at most {max_chars} "
            f"characters ({limit / 1e6:.2f} MB of UTF-8): split it into smaller files",
            code="lesson_file_too_large", size_mb=round(size / 1e6, 2), limit_chars=max_chars,
            limit_mb=round(limit / 1e6, 2))


def load_lesson(path: Path, max_chars: int, max_paragraph_chars: int) -> Lesson:
    """:func:`read_lesson` of a file on disk (an upload in the page's cache), its size checked
    before a byte of it is read."""
    check_lesson_size(Path(path).stat().st_size, max_chars)
    return read_lesson(Path(path).read_bytes(), Path(path).name, max_chars, max_paragraph_chars)


def read_lesson(data: bytes, filename: str, max_chars: int, max_paragraph_chars: int) -> Lesson:
    """Check and split an uploaded lesson file; a coded error names what is wrong with it.

    ``max_chars`` is the lesson's limit (the text read aloud, after Markdown marks are dropped);
    ``max_paragraph_chars`` is one request's text limit: longer paragraphs are cut at sentence ends.
    """
    suffix = Path(filename).suffix.lower()
    if suffix not in LESSON_SUFFIXES:
        raise TextError(f"a lesson must be a .txt or .md file, not {suffix or 'a file without a suffix'}",
                        code="lesson_file_type", suffix=suffix)
    check_lesson_size(len(data), max_chars)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TextError(f"the lesson file is not UTF-8 text (byte {exc.start} is not valid UTF-8): "
                        "save it as UTF-8 (\"UTF-8\" in the editor's Save As) and upload it again",
                        code="lesson_not_utf8", offset=exc.start) from None
    if "\x00" in text:
        raise TextError("the lesson file contains NUL characters: it is not a plain text file",
                        code="lesson_not_text")
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    if suffix == ".md":
        text = markdown_to_text(text)
    paragraphs = [" ".join(p.split()) for p in _BLANK_LINES.split(text)]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        raise TextError("the lesson file has no text to read", code="lesson_empty")
    total = sum(len(p) for p in paragraphs)
    if total > max_chars:
        raise TextError(f"the lesson has {total} characters; the limit is {max_chars}: split it into "
                        "smaller files", code="lesson_too_long", length=total, limit=max_chars)
    pieces: list[str] = []
    for number, paragraph in enumerate(paragraphs, start=1):
        for piece in split_long(paragraph, max_paragraph_chars):
            try:
                pieces.append(check_text(piece, max_paragraph_chars))
            except TextError as exc:
                raise TextError(f"paragraph {number} of the lesson cannot be read: {exc.message}",
                                code="lesson_paragraph_invalid", paragraph=number, reason=exc.code,
                                **exc.params) from None
    return Lesson(name=Path(filename).stem, paragraphs=tuple(pieces))


def markdown_to_text(text: str) -> str:
    """The words of a Markdown lesson: headings, quotes, bullets, emphasis, links and images kept as
    their text; code fences, rules and HTML tags dropped. A heading stays its own paragraph."""
    lines: list[str] = []
    in_fence = False
    for line in text.split("\n"):
        if _MD_FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or _MD_RULE.match(line):
            lines.append("")
            continue
        heading = bool(_MD_HEADING.match(line))
        line = _MD_BULLET.sub("", _MD_QUOTE.sub("", _MD_HEADING.sub("", line)))
        line = _MD_LINK.sub(r"\1", _MD_IMAGE.sub(r"\1", line))
        line = _HTML_TAG.sub("", _MD_EMPHASIS.sub(r"\2", line))
        lines.extend(["", line, ""] if heading else [line])
    return "\n".join(lines)


def split_long(paragraph: str, limit: int) -> list[str]:
    """``paragraph`` in pieces of at most ``limit`` characters: cut at sentence ends, then at clause
    marks or spaces, and only as a last resort inside a word."""
    if len(paragraph) <= limit:
        return [paragraph]
    pieces: list[str] = []
    current = ""
    for unit in _units(paragraph, limit):
        if current and len(current) + 1 + len(unit) > limit:
            pieces.append(current)
            current = unit
        else:
            current = f"{current} {unit}" if current and _spaced(current, unit) else current + unit
    if current:
        pieces.append(current)
    return pieces


def _spaced(left: str, right: str) -> bool:
    """Whether a space joins two units again (not between CJK characters)."""
    return not (_is_cjk(left[-1]) and _is_cjk(right[0]))


def _is_cjk(char: str) -> bool:
    return "\u3000" <= char <= "\u9fff" or "\uff00" <= char <= "\uffef"


def _units(paragraph: str, limit: int) -> list[str]:
    units: list[str] = []
    for sentence in (s for s in _SENTENCE_END.split(paragraph) if s):
        if len(sentence) <= limit:
            units.append(sentence)
            continue
        for clause in (c for c in _CLAUSE_END.split(sentence) if c):
            units.extend(clause[i:i + limit] for i in range(0, len(clause), limit))
    return units


# --- writing ------------------------------------------------------------------------------------


#: Length of the header :func:`wav_header` writes.
WAV_HEADER_BYTES = 44


def wav_header(frames: int, sample_rate: int) -> bytes:
    """The 44-byte header of a 16-bit mono PCM WAV of ``frames`` samples."""
    data = frames * 2
    return (b"RIFF" + struct.pack("<I", 36 + data) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data))


class WavAppender:
    """A 16-bit mono WAV written piece by piece to a temp file next to ``path``; :meth:`finish`
    writes the sizes into the header, syncs and renames it into place, :meth:`abort` removes it.
    Readers never see a half-written file under ``path``."""

    def __init__(self, path: Path, sample_rate: int) -> None:
        self.path = path
        self.sample_rate = sample_rate
        self.temp = path.with_name(f"{TEMP_PREFIX}{path.name}")
        self.frames = 0
        self._file: BinaryIO | None = open(self.temp, "wb")  # noqa: SIM115 - closed in finish/abort
        self._file.write(wav_header(0, sample_rate))

    def append(self, audio: np.ndarray) -> None:
        assert self._file is not None, "append after finish/abort"
        pcm = to_pcm16(audio)
        self._file.write(pcm.tobytes())
        self.frames += pcm.size

    def truncate(self, frames: int) -> None:
        """Forget everything after the first ``frames`` samples (a paragraph that failed half-way)."""
        assert self._file is not None, "truncate after finish/abort"
        self._file.truncate(WAV_HEADER_BYTES + frames * 2)
        self._file.seek(0, os.SEEK_END)
        self.frames = frames

    def finish(self) -> Path:
        assert self._file is not None, "finish after finish/abort"
        self._file.seek(0)
        self._file.write(wav_header(self.frames, self.sample_rate))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self.temp, self.path)
        return self.path

    def abort(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # a full disk may fail the close's flush too; the file goes anyway
            self._file = None
        self.temp.unlink(missing_ok=True)


def write_paragraph_zip(wav: Path, spans: list[tuple[int, int]], path: Path, sample_rate: int,
                        captions: Sequence[Captions] = ()) -> Path:
    """One WAV per paragraph (``spans``: first and last frame of each in ``wav``) into a zip at
    ``path``, copied from ``wav`` in blocks, with each paragraph's captions (``captions``, timed from
    the paragraph's own start) as ``.srt`` and ``.vtt``; written to a temp file and renamed into place."""
    temp = path.with_name(f"{TEMP_PREFIX}{path.name}")
    try:
        with open(wav, "rb") as source, zipfile.ZipFile(temp, "w", zipfile.ZIP_STORED) as archive:
            width = max(3, len(str(len(spans))))
            for number, (start, end) in enumerate(spans, start=1):
                frames = end - start
                with archive.open(f"paragraph-{number:0{width}d}.wav", "w", force_zip64=True) as member:
                    member.write(wav_header(frames, sample_rate))
                    source.seek(WAV_HEADER_BYTES + start * 2)
                    left = frames * 2
                    while left:
                        block = source.read(min(left, 1 << 20))
                        if not block:
                            break
                        member.write(block)
                        left -= len(block)
                if number <= len(captions):
                    for fmt in FORMATS:
                        archive.writestr(f"paragraph-{number:0{width}d}.{fmt}", captions[number - 1].render(fmt))
        with open(temp, "rb") as done:
            os.fsync(done.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path


# --- synthesis ----------------------------------------------------------------------------------


@dataclass
class LessonResult:
    """A finished lesson: where its files are and a truthful account of how it was made (the same
    fields the page's report reads from a :class:`~cosyedge.service.requests.TTSResult`)."""

    job_id: str
    path: Path
    zip_path: Path | None
    paragraphs: int
    sentences: int
    frames: int
    sample_rate: int
    seconds: float
    engine: str
    model_id: str
    voice: str
    voice_match: str
    instruct: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    similarity: float | None = None  # not measured: it would need the whole lesson's audio at once
    #: The whole lesson's captions, and their files next to its WAV by format ("srt", "vtt").
    captions: Captions = field(default_factory=Captions)
    caption_files: dict[str, Path] = field(default_factory=dict)
    #: The lesson's paragraphs; more than ``paragraphs`` (those read) when one failed.
    lesson_paragraphs: int = 0

    @property
    def duration(self) -> float:
        return self.frames / float(self.sample_rate) if self.sample_rate else 0.0

    def report(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "engine": self.engine, "model": self.model_id,
                "voice": self.voice, "voice_match": self.voice_match, "instruct": self.instruct,
                "notes": list(self.notes), "skipped": list(self.skipped),
                "paragraphs": self.paragraphs, "lesson_paragraphs": self.lesson_paragraphs or self.paragraphs,
                "sentences": self.sentences, "duration": round(self.duration, 3),
                "sample_rate": self.sample_rate, "seconds": round(self.seconds, 3),
                "zip": self.zip_path is not None, "captions": sorted(self.caption_files)}


@dataclass(frozen=True)
class LessonPlan:
    """What the service resolved once for the whole lesson: the voice, the options and the effects
    to run on each piece (``postprocess``: None when there are none)."""

    voice: str | VoicePrompt
    options: SynthesisOptions
    postprocess: Callable[[np.ndarray], np.ndarray] | None = None


def progress_note(done: int, total: int, seconds_left: float | None) -> Note:
    """The job's phase while a lesson is read: the paragraph being made and, once one is done, the
    time left (at the pace so far, by characters)."""
    left = "estimating the time left" if seconds_left is None else f"about {_clock(seconds_left)} left"
    return Note(f"paragraph {done + 1}/{total}, {left}", code="lesson_progress", paragraph=done + 1,
                total=total, seconds_left=None if seconds_left is None else round(seconds_left))


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


@dataclass
class LessonRun:
    """What :func:`synthesize_lesson` wrote: the frames, sentences and paragraphs in the files (fewer
    paragraphs than the lesson's when one failed), the text not read aloud, the whole lesson's
    captions, and its notes (the pronunciations of the later paragraphs, a paragraph that failed)."""

    frames: int
    sentences: int
    paragraphs: int
    skipped: list[str] = field(default_factory=list)
    captions: Captions = field(default_factory=Captions)
    notes: list[str] = field(default_factory=list)


def paragraph_failed_note(number: int, total: int, exc: BaseException) -> Note:
    """Paragraph ``number`` (1-based) failed: the lesson ends with the paragraph before it."""
    reason = getattr(exc, "code", type(exc).__name__)
    return Note(f"paragraph {number} of {total} could not be read ({reason}: {str(exc)[:160]}); the lesson ends "
                f"after paragraph {number - 1}, whose audio and captions are complete", code="lesson_paragraph_failed",
                paragraph=number, total=total, reason=reason)


def synthesize_lesson(engine: Engine, lesson: Lesson, plan: LessonPlan, wav_path: Path,
                      zip_path: Path | None = None, first: TextAnalysis | None = None,
                      phase: Callable[[str], None] | None = None,
                      report: Callable[[int, int], None] | None = None,
                      cancelled: CancelFn | None = None,
                      check_room: Callable[[], None] | None = None,
                      clock: Callable[[], float] = time.monotonic,
                      caption_paths: Iterable[Path] = ()) -> LessonRun:
    """Read ``lesson`` into ``wav_path`` (and the paragraph zip, with each paragraph's captions, when
    ``zip_path`` is given; the whole lesson's captions into each of ``caption_paths``, .srt or .vtt).

    ``first`` is the engine's analysis of the first paragraph when the caller has it already;
    ``check_room`` runs before each paragraph (the service's free-disk check). A full disk is a
    StorageFullError; a cancel leaves no file behind. A paragraph that fails (the engine refuses or
    breaks on it) ends the lesson after the paragraph before it: its files are finished with the
    paragraphs read, their captions intact, and a ``lesson_paragraph_failed`` note names the one that
    failed; when the first paragraph fails, its error is raised and nothing is kept.
    """
    say = phase or (lambda _: None)
    rate = engine.capabilities.sample_rate
    total = len(lesson.paragraphs)
    writer = WavAppender(wav_path, rate)
    spans: list[tuple[int, int]] = []
    captions: list[Captions] = []  # each paragraph's, from its own start
    run = LessonRun(frames=0, sentences=0, paragraphs=0)
    started = clock()
    done_chars = 0
    try:
        for index, paragraph in enumerate(lesson.paragraphs):
            if cancelled is not None and cancelled():
                raise CancelledError("cancelled")
            if check_room is not None:
                check_room()
            seconds_left = None
            if done_chars:
                seconds_left = (clock() - started) / done_chars * (lesson.chars - done_chars)
            say(progress_note(index, total, seconds_left))
            if report is not None:
                report(index, total)
            try:
                track = _read_paragraph(engine, paragraph, index, plan, writer, run, first, cancelled)
            except (CancelledError, StorageFullError, OSError):
                raise
            except Exception as exc:  # noqa: BLE001 - the engine failing on one paragraph ends the lesson there
                if not spans:
                    raise
                logger.warning("lesson %s: paragraph %d failed (%s); keeping paragraphs 1-%d", wav_path.name,
                               index + 1, exc, index)
                writer.truncate(spans[-1][1])
                run.notes.append(paragraph_failed_note(index + 1, total, exc))
                break
            spans.append((writer.frames - track.samples, writer.frames))
            captions.append(track.captions())
            done_chars += len(paragraph)
        if report is not None:
            report(total, total)
        writer.finish()
        run.frames, run.paragraphs = writer.frames, len(spans)
        run.captions = Captions(tuple(cue for part, (start, _) in zip(captions, spans)
                                      for cue in part.shifted(start / rate).cues))
        for path in caption_paths:
            write_captions(path, run.captions)
        if zip_path is not None:
            say(Note("cutting one file per paragraph", code="lesson_zipping"))
            write_paragraph_zip(wav_path, spans, zip_path, rate, captions)
    except OSError as exc:
        _discard(writer, wav_path, zip_path, caption_paths)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(wav_path.parent).free / 1e6
            raise StorageFullError(f"the disk holding {wav_path.parent} filled up while the lesson was "
                                   f"written ({free:.1f} MB free): nothing was kept; delete old outputs "
                                   "and try again", code="disk_full", folder=str(wav_path.parent),
                                   free_mb=free, needed_mb=None) from exc
        raise
    except BaseException:
        _discard(writer, wav_path, zip_path, caption_paths)
        raise
    logger.info("lesson %s: %d of %d paragraphs, %.1f s of audio", wav_path.name, run.paragraphs, total,
                writer.frames / rate)
    return run


def _read_paragraph(engine: Engine, paragraph: str, index: int, plan: LessonPlan, writer: WavAppender,
                    run: LessonRun, first: TextAnalysis | None, cancelled: CancelFn | None) -> CaptionTrack:
    """One paragraph appended to ``writer`` (after the paragraph pause), its text not read and its
    pronunciation notes kept in ``run``; its captions, from its own start."""
    rate = engine.capabilities.sample_rate
    analysis = first if index == 0 and first is not None else engine.analyze(paragraph, plan.options.language)
    for line in analysis.skipped:
        if line not in run.skipped and len(run.skipped) < MAX_REPORT_LINES:
            run.skipped.append(line)
    if index:  # the first paragraph's notes are the request's own (ResolvedRequest.notes)
        known = {_note_key(kept) for kept in run.notes}
        for note in analysis.notes:  # told apart by code and params, as the page reads them
            if code_of(note) in READING_NOTES and _note_key(note) not in known and len(run.notes) < MAX_REPORT_LINES:
                run.notes.append(note)
        writer.append(np.zeros(int(PARAGRAPH_PAUSE_S * rate), dtype=np.float32))
    joiner, track = Joiner(rate), CaptionTrack(rate)
    for chunk in engine.synthesize(analysis, plan.voice, plan.options, cancelled=cancelled):
        made = piece = joiner.piece(chunk.audio, chunk.pause_after_s)
        if plan.postprocess is not None and piece.size:
            piece = plan.postprocess(piece)
        track.add(chunk, made, piece.size)
        writer.append(piece)
        run.sentences += 1
    return track


def _note_key(note: str) -> tuple[str | None, str]:
    """What makes two notes the same note: their code and params."""
    return code_of(note), repr(sorted(getattr(note, "params", {}).items()))


def _discard(writer: WavAppender, wav_path: Path, zip_path: Path | None, caption_paths: Iterable[Path]) -> None:
    """A lesson that is not kept: nothing of it stays."""
    writer.abort()
    for path in (wav_path, zip_path, *caption_paths):
        if path is not None:
            path.unlink(missing_ok=True)
