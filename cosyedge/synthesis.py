"""One synthesis run from text to a finished waveform, shared by the CLI and the service.

Checks the text against the limit, drives ``engine.synthesize`` sentence by sentence and joins the
chunks with short pauses. Queues, files and HTTP are the caller's business.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from cosyedge.audio import join_sentences
from cosyedge.engines.base import CancelFn, Engine, ProgressFn, SynthesisOptions, VoicePrompt
from cosyedge.errors import TextError

logger = logging.getLogger(__name__)


@dataclass
class SynthesisResult:
    """Mono float32 audio plus what was spoken, sentence by sentence."""

    audio: np.ndarray
    sample_rate: int
    sentences: list[str]

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


def check_text(text: object, max_chars: int) -> str:
    """The text to speak, or TextError saying what is wrong with it."""
    if not isinstance(text, str):
        raise TextError(f"text must be a string, not {type(text).__name__}")
    if not text.strip():
        raise TextError("text is empty; type something to read")
    if len(text) > max_chars:
        raise TextError(f"text has {len(text)} characters; the limit is {max_chars} "
                        "(split it, or raise COSYEDGE_MAX_TEXT_CHARS)")
    return text


def synthesize(engine: Engine, text: str, voice: str | VoicePrompt, options: SynthesisOptions,
               max_chars: int, progress: ProgressFn | None = None,
               cancelled: CancelFn | None = None) -> SynthesisResult:
    """Run the engine over every sentence and join the result."""
    text = check_text(text, max_chars)
    chunks = list(engine.synthesize(text, voice, options, progress=progress, cancelled=cancelled))
    sample_rate = engine.capabilities.sample_rate
    audio = join_sentences((c.audio for c in chunks), sample_rate)
    return SynthesisResult(audio=audio, sample_rate=sample_rate, sentences=[c.text for c in chunks])
