"""What CosyVoice2-0.5B states at run time, in the version-description form
(:class:`cosyedge.engines.cosyvoice.versions.Cosy2FormDescription`).

v2 is the form the shared parts implement, so most members are the plain case: a zero-shot prompt
is the transcript as it is, a sentence is read as it is, every speech token goes to the flow. An
instruction is ``"<instruction><|endofprompt|>"`` (upstream's instruct2).
"""

from __future__ import annotations

import logging
from typing import Sequence

from cosyedge.engines.cosyvoice.common.tokenizer import COSYVOICE2_SPECIALS, END_OF_PROMPT
from cosyedge.engines.cosyvoice.common.readings import homophone_spelling
from cosyedge.lexicon.entries import Entry

logger = logging.getLogger(__name__)

VERSION = 2
LANGUAGES = ("auto", "zh", "en", "ja")
SPECIALS = COSYVOICE2_SPECIALS
EVERY_INPUT_ENDS_PROMPT = False


def format_instruction(text: str) -> str:
    """A cleaned instruction followed by the end-of-prompt token."""
    return f"{text}{END_OF_PROMPT}"


def zero_shot_prompt(transcript: str) -> str:
    """The LLM prompt text of a zero-shot clone: the prompt's transcript."""
    return transcript


def cross_lingual_text(sentence: str) -> str:
    """A sentence without a prompt text, as v2 reads it: unchanged."""
    return sentence


def speech_tokens(tokens: Sequence[int]) -> Sequence[int]:
    """The LLM's speech tokens as the flow is given them: all of them, unchanged."""
    return tokens


def load_token2wav(model, threads: int = 0):  # noqa: ANN001, ANN201 - a ModelDir; a Token2Wav
    """The flow (with its streaming graphs where converted) and HiFT of an opened model directory."""
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav

    return Token2Wav.load(model, threads=threads)


def spell_reading(entry: Entry) -> tuple[str | None, str]:
    """CosyVoice2 takes no phones: unambiguous homophones for Mandarin, kana for Japanese, English
    not at all (:func:`cosyedge.engines.cosyvoice.common.readings.homophone_spelling`)."""
    return homophone_spelling(entry)
