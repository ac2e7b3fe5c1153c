"""How a CosyVoice model reads an instruction: the prompt format of each version.

v2 (instruct2) reads ``"<instruction><|endofprompt|>"``; v3 reads ``"You are a helpful assistant.
<instruction><|endofprompt|>"``. v1 (300M-Instruct) reads ``"<instruction><endofprompt>"``: upstream
``frontend_instruct`` @46dfe04 appends ``'<endofprompt>'`` (no bars), which whisper's tokenizer reads as
plain text. The engine formats with its model's version
(from the manifest, :mod:`cosyedge.catalog.manifest`); :mod:`cosyedge.instruct.plan` asks the engine for it.
"""

from __future__ import annotations

import re

from cosyedge.engines.cosyvoice.common.tokenizer import END_OF_PROMPT
from cosyedge.errors import ParameterError

#: Written before a v3 instruction.
V3_SYSTEM = "You are a helpful assistant."
#: Written after a v1 instruction (upstream cosyvoice/cli/frontend.py @46dfe04, frontend_instruct).
V1_END = "<endofprompt>"
VERSIONS = (1, 2, 3)
_SPECIAL_TOKEN = re.compile(r"<\|[^|>]*\|>")


def format_instruction(instruction: str, version: int) -> str:
    """``instruction`` as a CosyVoice ``version`` model expects it. Special tokens typed by the user
    (``<|...|>``) are removed first, so formatting twice gives the same text and cannot be spoofed."""
    if version not in VERSIONS:
        raise ParameterError(f"CosyVoice version {version!r} must be one of {', '.join(map(str, VERSIONS))}",
                             code="model_version_unknown", model_version=version, choices=VERSIONS)
    text = _SPECIAL_TOKEN.sub(" ", instruction.replace(V1_END, " "))
    text = re.sub(r"\s+", " ", text).strip()
    if version == 3:
        if text.startswith(V3_SYSTEM):
            text = text[len(V3_SYSTEM):].strip()
        return f"{V3_SYSTEM} {text}{END_OF_PROMPT}"
    if version == 1:
        return f"{text}{V1_END}"
    return f"{text}{END_OF_PROMPT}"
