"""Prompt transcripts offline: what a prompt says, and whether it may drive a zero-shot clone.

CosyVoice clones a prompt in one of two ways: zero-shot reads the prompt's transcript and its speech
tokens before the text (the closest clone), cross-lingual reads the text alone next to the prompt's
sound. A transcript that is wrong misleads the zero-shot LLM (it aligns the prompt's speech with the
wrong words), which is worse than cross-lingual. So a transcript typed by the user is always used,
and one heard by the offline recognizer (:mod:`cosyedge.listening.asr`) only when its confidence reaches
:data:`ZERO_SHOT_CONFIDENCE`, the threshold measured in docs/bench-log/asr-and-voices.md ("Prompt transcripts").

:func:`hear` turns a recognizer's answer into a :class:`PromptTranscript`; :func:`clone_plan`
decides the mode and the note that says why. The service runs them inside a queued job.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from cosyedge.notes import Note

logger = logging.getLogger(__name__)

#: The recognizer's confidence (geometric mean of its token probabilities, ``asr.Transcript``) a
#: heard transcript needs to drive a zero-shot clone. Measured by ``bench/asr_transcripts.py``
#: (docs/bench-log/asr-and-voices.md, "Prompt transcripts"): no clip whose transcript had more than 20 % word or
#: character errors reached it; 0.70 let garbled ones through (up to 40 % errors), and clean
#: synthetic speech mostly scores 0.81-0.94.
ZERO_SHOT_CONFIDENCE = 0.80
#: The languages the recognizer may be told; others are detected.
NAMED_LANGUAGES = ("zh", "en", "ja")

SOURCE_USER = "user"  # typed (or edited) by a person
SOURCE_HEARD = "asr"  # heard by the offline recognizer

ZERO_SHOT = "zero_shot"
CROSS_LINGUAL = "cross_lingual"

#: ``transcribe(audio, sample_rate, language or None)`` -> an ``asr.Transcript``.
Transcribe = Callable[..., Any]


@dataclass(frozen=True)
class PromptTranscript:
    """A prompt's transcript and where it came from (``confidence``: the recognizer's, heard ones only)."""

    text: str
    source: str = SOURCE_USER
    confidence: float | None = None
    language: str | None = None

    @property
    def trusted(self) -> bool:
        """Whether it may drive a zero-shot clone: typed, or heard with enough confidence."""
        if not self.text.strip():
            return False
        return self.source == SOURCE_USER or (self.confidence or 0.0) >= ZERO_SHOT_CONFIDENCE

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "source": self.source, "confidence": self.confidence,
                "language": self.language, "trusted": self.trusted}


def hear(transcribe: Transcribe, audio: np.ndarray, sample_rate: int,
         language: str | None = None) -> PromptTranscript:
    """What the recognizer hears in a prompt; ``language`` (zh/en/ja) is named to it, another or
    ``auto`` is detected."""
    named = language if language in NAMED_LANGUAGES else None
    heard = transcribe(audio, sample_rate, named)
    logger.info("prompt heard (%s, confidence %.2f, %d characters)", heard.language, heard.confidence,
                len(heard.text))  # what was said stays out of the log
    text = heard.text.strip()
    if heard.language == "zh":
        text = simplified(text)
    return PromptTranscript(text=text, source=SOURCE_HEARD,
                            confidence=round(float(heard.confidence), 4), language=heard.language)


@functools.lru_cache(maxsize=1)
def _to_simplified() -> Callable[[str], str] | None:
    try:
        import opencc
    except ImportError:  # installed with the recognizer (requirements.txt); without it, kept as heard
        logger.warning("opencc is not installed: Mandarin transcripts stay in the script they were heard in")
        return None
    return opencc.OpenCC("t2s").convert


def simplified(text: str) -> str:
    """A heard Mandarin transcript in simplified characters. Whisper often writes Mandarin in
    traditional ones; a transcript a person typed is never changed. Character by character
    (OpenCC ``t2s``), not phrase by phrase: a word is spelled differently, never replaced by
    another that sounds different."""
    convert = _to_simplified()
    return convert(text) if convert is not None else text


@dataclass(frozen=True)
class ClonePlan:
    """How a native-clone engine gets the prompt: the transcript it reads (None: cross-lingual),
    the mode, and the note for the answer (None when the user typed the transcript)."""

    transcript: str | None
    mode: str
    note: Note | None = None


def clone_plan(transcript: PromptTranscript | None, unavailable: str | None = None) -> ClonePlan:
    """Zero-shot with a trusted transcript, else cross-lingual with a note saying why
    (``unavailable``: why nothing could be heard, e.g. the recognizer is not installed)."""
    if transcript is not None and transcript.source == SOURCE_USER and transcript.text.strip():
        return ClonePlan(transcript.text.strip(), ZERO_SHOT)
    if transcript is None or not transcript.text.strip():
        if unavailable:
            return ClonePlan(None, CROSS_LINGUAL, Note(
                f"no prompt transcript and none could be heard offline ({unavailable}): cloned "
                "cross-lingually, from the prompt's sound alone; type the transcript for a zero-shot clone",
                code="transcript_unavailable", reason=unavailable))
        return ClonePlan(None, CROSS_LINGUAL, Note(
            "no prompt transcript and no speech heard in the prompt: cloned cross-lingually, from the "
            "prompt's sound alone; type the transcript for a zero-shot clone", code="transcript_not_heard"))
    confidence = transcript.confidence or 0.0
    if transcript.trusted:
        return ClonePlan(transcript.text, ZERO_SHOT, Note(
            f"prompt transcript heard offline (confidence {confidence:.2f}): \u201c{transcript.text}\u201d; "
            "zero-shot clone with it", code="transcript_heard", heard=transcript.text, confidence=confidence))
    return ClonePlan(None, CROSS_LINGUAL, Note(
        f"prompt transcript heard offline with confidence {confidence:.2f}, under the "
        f"{ZERO_SHOT_CONFIDENCE:.2f} a zero-shot clone needs (a wrong transcript is worse than none): "
        f"cloned cross-lingually; heard \u201c{transcript.text}\u201d, type or correct it for a zero-shot clone",
        code="transcript_unsure", heard=transcript.text, confidence=confidence,
        threshold=ZERO_SHOT_CONFIDENCE))
