"""One synthesis run from text to a finished waveform, shared by the CLI and the service.

:func:`check_text` is the one check of a request's text (the service runs it when a request is
prepared). :func:`stream` hands out each joined piece as soon as its chunk is made (for streaming
clients); :func:`synthesize` is the same run collected into one waveform with its captions
(``Synthesized``, :mod:`cosyedge.service.captions`). Both take the raw text (checked here, then run
through the engine's sentence loop and join, :mod:`cosyedge.engines.render`) or the engine's
:class:`~cosyedge.engines.base.TextAnalysis` of a checked text, so the engine's text pass is not
repeated. Queues, files and HTTP are the caller's.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from cosyedge.engines import render
from cosyedge.engines.base import (AudioChunk, CancelFn, Engine, ProgressFn, SynthesisOptions,
                                   TextAnalysis, VoicePrompt)
from cosyedge.engines.render import SynthesisResult
from cosyedge.service.captions import Captions, CaptionTrack
from cosyedge.errors import TextError

logger = logging.getLogger(__name__)

#: SSML-style markup: engines would read the tags aloud ("less than speak greater than ...").
SSML_TAG_RE = re.compile(r"</?\s*(speak|prosody|break|emphasis|say-as|voice|phoneme|sub|audio|mark|"
                         r"lang|p|s|w|amazon:[\w-]+|mstts:[\w-]+)(\s[^<>]*)?/?>", re.IGNORECASE)


def check_text(text: object, max_chars: int) -> str:
    """The text to speak, or TextError saying what is wrong with it (empty, too long, markup)."""
    if not isinstance(text, str) or not text.strip():
        raise TextError("text is empty: type something to read", code="text_empty")
    if len(text) > max_chars:
        raise TextError(f"text is {len(text)} characters; the limit is {max_chars}",
                        code="text_too_long", length=len(text), limit=max_chars)
    tag = SSML_TAG_RE.search(text)
    if tag:
        raise TextError(f"text contains markup ({tag.group(0)[:40]}): SSML tags are not supported; "
                        "send plain text (use speed and instruct for delivery)",
                        code="text_markup", markup=tag.group(0)[:40])
    return text


def stream(engine: Engine, text: str | TextAnalysis, voice: str | VoicePrompt,
           options: SynthesisOptions, max_chars: int, progress: ProgressFn | None = None,
           cancelled: CancelFn | None = None) -> Iterator[tuple[AudioChunk, np.ndarray]]:
    """Each chunk as the engine makes it, with its joined piece (:func:`cosyedge.engines.render.pieces`).
    A raw text is checked before the engine runs, so a bad text fails before anything is yielded."""
    if not isinstance(text, TextAnalysis):
        text = check_text(text, max_chars)
    yield from render.pieces(engine, text, voice, options, progress, cancelled)


@dataclass
class Synthesized(SynthesisResult):
    """A run's waveform with its captions (one cue per sentence, at the joined audio's offsets)."""

    captions: Captions = field(default_factory=Captions)


def synthesize(engine: Engine, text: str | TextAnalysis, voice: str | VoicePrompt,
               options: SynthesisOptions, max_chars: int, progress: ProgressFn | None = None,
               cancelled: CancelFn | None = None) -> Synthesized:
    """Run the engine over every sentence and join the result, with its captions; a raw text is
    checked first."""
    if not isinstance(text, TextAnalysis):
        text = check_text(text, max_chars)
    track = CaptionTrack(engine.capabilities.sample_rate)
    out = render.render(engine, text, voice, options, progress, cancelled, on_piece=track.add)
    return Synthesized(audio=out.audio, sample_rate=out.sample_rate, sentences=out.sentences,
                       captions=track.captions())
