"""Captions for an answer's audio: one cue per sentence, placed by the joined audio's real offsets,
with word timings where the engine knows them; written as SRT or WebVTT.

:class:`CaptionTrack` is fed each chunk with the piece the joiner made of it (the pause before it +
the faded chunk, :class:`cosyedge.audio.Joiner`), after any effects: the cues therefore follow the
audio actually returned, with its trimmed silence, pauses, fades and the first-clause cut. The
engine's own sentence units decide the cues: a chunk with ``ends_sentence=False`` (Kokoro's cut at a
clause) or ``continues=True`` (a streamed hop of CosyVoice) is joined to the next one in one cue.
Word cues come from ``AudioChunk.words`` (Kokoro, from its duration predictor); an engine that does
not time its words (CosyVoice) gives sentence cues only.

WebVTT carries the words as cue timestamps (``<00:00:01.200>``, karaoke style: players that do not
highlight show the sentence); SRT has no such thing and carries the sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import numpy as np

from cosyedge.engines.base import AudioChunk
from cosyedge.errors import ParameterError

#: The caption formats an answer can carry (REST ``"captions"``, the CLI's file suffix).
FORMATS = ("srt", "vtt")


@dataclass(frozen=True)
class WordCue:
    """A word and when it is heard, in seconds from the start of the audio."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Cue:
    """A sentence and when it is heard, in seconds from the start of the audio."""

    start: float
    end: float
    text: str
    words: tuple[WordCue, ...] = ()

    def shifted(self, seconds: float) -> "Cue":
        return Cue(self.start + seconds, self.end + seconds, self.text,
                   tuple(replace(w, start=w.start + seconds, end=w.end + seconds) for w in self.words))

    def as_dict(self) -> dict[str, Any]:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "words": [{"text": w.text, "start": round(w.start, 3), "end": round(w.end, 3)} for w in self.words]}


@dataclass(frozen=True)
class Captions:
    """The cues of one audio, in order and inside it."""

    cues: tuple[Cue, ...] = ()

    @property
    def has_words(self) -> bool:
        return any(cue.words for cue in self.cues)

    def shifted(self, seconds: float) -> "Captions":
        return Captions(tuple(cue.shifted(seconds) for cue in self.cues))

    def scaled(self, factor: float) -> "Captions":
        """Every time times ``factor``: effects run on the whole audio that changed its length."""
        if factor == 1.0:
            return self
        return Captions(tuple(Cue(c.start * factor, c.end * factor, c.text,
                                  tuple(WordCue(w.text, w.start * factor, w.end * factor) for w in c.words))
                              for c in self.cues))

    def render(self, fmt: str) -> str:
        """The captions as a file's text: ``"srt"`` or ``"vtt"``."""
        if fmt == "srt":
            return to_srt(self.cues)
        if fmt == "vtt":
            return to_vtt(self.cues)
        raise ValueError(f"caption format {fmt!r} is not one of {FORMATS}")  # callers check with caption_format

    def as_dicts(self) -> list[dict[str, Any]]:
        return [cue.as_dict() for cue in self.cues]


@dataclass
class _Open:
    start: int
    end: int
    texts: list[str]
    words: list[WordCue] = field(default_factory=list)


def caption_format(name: object) -> str:
    """``"srt"`` or ``"vtt"`` from a request's value or a file's suffix (``.vtt``), else a coded refusal."""
    fmt = str(name or "").strip().lower().lstrip(".")
    if fmt not in FORMATS:
        raise ParameterError(f"captions {name!r}: choose one of {', '.join(FORMATS)} (SubRip or WebVTT)",
                             code="captions_format_unknown", value=str(name)[:40], choices=FORMATS)
    return fmt


class CaptionTrack:
    """Builds the captions of one run, one chunk at a time (see the module docstring)."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.samples = 0  # the audio so far, as returned
        self._cues: list[Cue] = []
        self._open: _Open | None = None
        self._same_text = False  # the open cue's last chunk was a streamed hop: its text repeats

    def add(self, chunk: AudioChunk, piece: np.ndarray, length: int | None = None) -> None:
        """One chunk and its joined ``piece``; ``length`` is the piece's length after effects (None:
        unchanged). Effects that change the length scale the times inside the piece."""
        made = int(piece.size)
        length = made if length is None else int(length)
        audio = int(np.asarray(chunk.audio).size)
        if made == 0 or audio == 0:
            self.samples += length
            if self._open is not None and chunk.ends_sentence and not chunk.continues:
                self._close()
            return
        scale = length / made
        first = self.samples + int(round((made - audio) * scale))  # the chunk's own audio starts here
        last = self.samples + length
        seconds = lambda t: (first + t * self.sample_rate * scale) / self.sample_rate  # noqa: E731
        words = [WordCue(w.text, seconds(w.start), seconds(w.end)) for w in chunk.words]
        if self._open is None:
            self._open = _Open(first, last, [chunk.text], words)
        else:
            self._open.end = last
            if not self._same_text:
                self._open.texts.append(chunk.text)
            self._open.words.extend(words)
        self._same_text = chunk.continues
        self.samples += length
        if chunk.ends_sentence and not chunk.continues:
            self._close()

    def _close(self) -> None:
        opened, self._open = self._open, None
        self._same_text = False
        text = _join_texts(opened.texts)
        if text:
            rate = float(self.sample_rate)
            self._cues.append(Cue(opened.start / rate, opened.end / rate, text, tuple(opened.words)))

    def captions(self) -> Captions:
        """The cues so far (a sentence still open is closed where its audio ends)."""
        if self._open is not None:
            self._close()
        return Captions(tuple(self._cues))


def _join_texts(texts: Iterable[str]) -> str:
    """A sentence's pieces as one line: CJK pieces run on, others take a space."""
    out = ""
    for text in (t.strip() for t in texts):
        if not text:
            continue
        cjk = out and not out[-1].isascii() and not text[0].isascii()
        out += text if not out or cjk else " " + text
    return " ".join(out.split())


def _stamp(seconds: float, comma: bool) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{',' if comma else '.'}{ms:03d}"


def _cue_text(text: str) -> str:
    """Cue text that cannot end the cue early or read as a timing line."""
    return text.replace("-->", "→").replace("\n", " ")


def to_srt(cues: Iterable[Cue]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm`` times, the sentences."""
    blocks = [f"{n}\n{_stamp(c.start, True)} --> {_stamp(c.end, True)}\n{_cue_text(c.text)}\n"
              for n, c in enumerate(cues, start=1)]
    return "\n".join(blocks)


def _escape(text: str) -> str:
    return _cue_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(cues: Iterable[Cue]) -> str:
    """WebVTT: one cue per sentence; where the words are timed, a timestamp goes before each word of
    the sentence after the first (each strictly inside the cue and after the one before, as the
    format asks; punctuation stays where it is)."""
    blocks = ["WEBVTT\n"]
    for n, cue in enumerate(cues, start=1):
        blocks.append(f"{n}\n{_stamp(cue.start, False)} --> {_stamp(cue.end, False)}\n{_timed_text(cue)}\n")
    return "\n".join(blocks)


def _timed_text(cue: Cue) -> str:
    """The cue's text with its words' timestamps in it; the plain text when a word is not found in it."""
    text = _cue_text(cue.text)
    out, pos, last = [], 0, cue.start
    for word in cue.words:
        at = text.find(word.text, pos)
        if at < 0:
            return _escape(text)
        stamp = round(word.start, 3)
        out.append(_escape(text[pos:at]))
        if out != [""] and last < stamp < cue.end:
            out.append(f"<{_stamp(stamp, False)}>")
            last = stamp
        out.append(_escape(word.text))
        pos = at + len(word.text)
    out.append(_escape(text[pos:]))
    return "".join(out)
