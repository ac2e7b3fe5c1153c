"""An engine's sentence loop and join, for any caller holding an engine: :func:`pieces` runs
``engine.synthesize`` and joins each chunk with the short pause and fades of
:class:`cosyedge.audio.Joiner` as soon as it is made; :func:`render` collects them into one waveform.

The text is taken as given, raw or as the engine's :class:`~cosyedge.engines.base.TextAnalysis`: a
request's text is checked by the service first (:mod:`cosyedge.service.synthesis`), and an engine's
own fixed lines (Kokoro's listening check) need no check. Queues, files and HTTP are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from cosyedge.audio import Joiner
from cosyedge.engines.base import (AudioChunk, CancelFn, Engine, ProgressFn, SynthesisOptions, TextAnalysis,
                                   VoicePrompt)


@dataclass
class SynthesisResult:
    """Mono float32 audio plus what was spoken, sentence by sentence."""

    audio: np.ndarray
    sample_rate: int
    sentences: list[str]

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


def pieces(engine: Engine, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
           progress: ProgressFn | None = None,
           cancelled: CancelFn | None = None) -> Iterator[tuple[AudioChunk, np.ndarray]]:
    """Each chunk as the engine makes it, with its joined piece (the pause before it + the faded
    chunk; empty for a silent chunk); the pieces in order concatenate to :func:`render`'s audio."""
    joiner = Joiner(engine.capabilities.sample_rate)
    for chunk in engine.synthesize(text, voice, options, progress=progress, cancelled=cancelled):
        yield chunk, joiner.piece(chunk.audio, chunk.pause_after_s, chunk.continues)


def render(engine: Engine, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
           progress: ProgressFn | None = None, cancelled: CancelFn | None = None,
           on_piece: Callable[[AudioChunk, np.ndarray], None] | None = None) -> SynthesisResult:
    """Run the engine over every sentence and join the result; ``on_piece(chunk, piece)`` sees each
    chunk with its joined piece as it is made (the service's captions follow the pieces)."""
    joined, sentences = [], []
    for chunk, piece in pieces(engine, text, voice, options, progress, cancelled):
        if on_piece is not None:
            on_piece(chunk, piece)
        joined.append(piece)
        if not chunk.continues:
            sentences.append(chunk.text)
    audio = np.concatenate(joined) if joined else np.zeros(0, dtype=np.float32)
    return SynthesisResult(audio=audio, sample_rate=engine.capabilities.sample_rate, sentences=sentences)
