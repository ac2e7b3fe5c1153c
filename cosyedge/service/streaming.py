"""A job's audio as it is made: the hand-over point between a synthesis worker and its readers.

The worker (a job thread) calls :meth:`AudioStream.start` once it knows the sample rate and what the
engine will do, then :meth:`~AudioStream.put` for each joined piece (pause + chunk,
:class:`cosyedge.audio.Joiner`), and the job queue closes the stream when the job ends, with the
job's error if it failed or was cancelled, so a reader never waits forever. Readers (the REST
stream in an event loop, the UI) iterate from the first piece at their own pace; any number may
read, each with its own position. Pieces are kept until the job's result is released; a reader
already reading then still gets every piece (the memory goes when the last such reader stops), a
new reader is turned away.

Each stream has a random ``token``: the page's live player reads a UI job's stream over HTTP with it
(``GET /jobs/{id}/audio?token=...``); job ids are listed by ``GET /jobs``, tokens nowhere.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator

import numpy as np

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamInfo:
    """What a streaming reader needs before the first byte (HTTP headers, a player's rate)."""

    sample_rate: int
    engine: str
    model_id: str
    report: dict[str, Any] = field(default_factory=dict)  # voice, voice_match, instruct (no similarity yet)


class AudioStream:
    """Thread-safe, append-only list of float32 pieces plus an end (clean or with an error)."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(16)
        self._cond = threading.Condition()
        self._pieces: list[np.ndarray] = []
        self._info: StreamInfo | None = None
        self._closed = False
        self._released = False
        self._readers = 0  # readers between their first and last piece (release waits for them)
        self.error: BaseException | None = None
        self._listeners: list[Callable[[], None]] = []

    # --- producer (the job's worker thread, and the queue when the job ends) -------------------
    def start(self, info: StreamInfo) -> None:
        with self._cond:
            self._info = info
        self._notify()

    def put(self, piece: np.ndarray) -> None:
        """Append the next piece (empty pieces are dropped)."""
        if piece.size == 0:
            return
        with self._cond:
            if self._closed:
                raise RuntimeError("audio stream already closed")
            self._pieces.append(piece)
        self._notify()

    def close(self, error: BaseException | None = None) -> None:
        """End the stream (idempotent; the first close wins)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self.error = error
        self._notify()

    def share(self, audio: np.ndarray) -> None:
        """Make the pieces views into ``audio``, their concatenation (the job's result), so a
        finished job holds its audio once rather than twice. Readers see the same samples."""
        with self._cond:
            sizes = [piece.size for piece in self._pieces]
            if sum(sizes) != audio.size:
                logger.warning("audio stream: result of %d samples is not the %d streamed; kept apart",
                               audio.size, sum(sizes))
                return
            bounds = np.cumsum([0, *sizes])
            self._pieces = [audio[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def release(self) -> None:
        """Drop the pieces of a finished stream (the queue keeps only recent results); with
        readers still reading, once the last of them stops."""
        with self._cond:
            if self._closed:
                self._released = True
                if not self._readers:
                    self._pieces = []

    # --- readers -----------------------------------------------------------------------------
    @property
    def info(self) -> StreamInfo | None:
        return self._info

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def released(self) -> bool:
        """True once the audio is gone for new readers (the job finished long ago)."""
        return self._released

    @property
    def readers(self) -> int:
        """How many readers are iterating now (release drops the audio once the last one stops)."""
        with self._cond:
            return self._readers

    @property
    def held_pieces(self) -> int:
        """How many pieces the stream holds in memory (0 once released and no reader is left)."""
        with self._cond:
            return len(self._pieces)

    def _join(self) -> None:
        with self._cond:
            if self._released:
                raise RuntimeError("this stream finished long ago; its audio has been released")
            self._readers += 1

    def _leave(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._released and not self._readers:
                self._pieces = []

    def _snapshot(self, index: int) -> tuple[list[np.ndarray], bool, BaseException | None]:
        with self._cond:
            return self._pieces[index:], self._closed, self.error

    def pieces(self, timeout: float | None = None) -> Iterator[np.ndarray]:
        """Blocking iteration from the first piece; raises the job's error after the last piece.
        ``timeout`` bounds each wait (TimeoutError), for callers that must not hang."""
        self._join()
        try:
            index = 0
            while True:
                self._wait_beyond(index, timeout)
                new, closed, error = self._snapshot(index)
                yield from new
                index += len(new)
                if closed and not new:
                    if error is not None:
                        raise error
                    return
        finally:
            self._leave()

    def _wait_beyond(self, index: int, timeout: float | None) -> None:
        """Block until the stream holds more than ``index`` pieces or is closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._closed or len(self._pieces) > index, timeout):
                raise TimeoutError("no audio arrived in time")

    async def pieces_async(self) -> AsyncIterator[np.ndarray]:
        """Like :meth:`pieces`, awaited from an event loop without blocking it."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def listener() -> None:
            loop.call_soon_threadsafe(wake.set)

        self._join()
        with self._cond:
            self._listeners.append(listener)
        try:
            index = 0
            while True:
                wake.clear()  # before looking, so a piece put in between still wakes us
                new, closed, error = self._snapshot(index)
                for piece in new:
                    yield piece
                index += len(new)
                if new:
                    continue
                if closed:
                    if error is not None:
                        raise error
                    return
                await wake.wait()
        finally:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)
            self._leave()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except RuntimeError:  # the reader's event loop has closed; it is gone
                logger.debug("audio stream listener of a closed event loop ignored")
