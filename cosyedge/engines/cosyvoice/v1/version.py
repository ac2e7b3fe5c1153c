"""What CosyVoice-300M states at run time, in the version-description form
(:class:`cosyedge.engines.cosyvoice.versions.VersionDescription`); its engine (:mod:`.engine`) reads it.

An instruction (300M-Instruct) is ``"<instruction><endofprompt>"``: upstream ``frontend_instruct``
@46dfe04 appends ``'<endofprompt>'`` (no bars), which whisper's tokenizer reads as plain text.
"""

from __future__ import annotations

import logging

from cosyedge.engines.cosyvoice.common.instruct_format import V1_END
from cosyedge.engines.cosyvoice.common.readings import homophone_spelling
from cosyedge.lexicon.entries import Entry

logger = logging.getLogger(__name__)

VERSION = 1
LANGUAGES = ("auto", "zh", "en", "ja")


def format_instruction(text: str) -> str:
    """A cleaned instruction followed by v1's plain-text end mark."""
    return f"{text}{V1_END}"


def spell_reading(entry: Entry) -> tuple[str | None, str]:
    """CosyVoice-300M takes no phones: unambiguous homophones for Mandarin, kana for Japanese,
    English not at all (:func:`cosyedge.engines.cosyvoice.common.readings.homophone_spelling`)."""
    return homophone_spelling(entry)
