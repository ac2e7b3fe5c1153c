"""How a CosyVoice model reads an instruction: typed special tokens removed, then the prompt format of
the model's version (its version description's ``format_instruction``, picked by the registry
:mod:`cosyedge.engines.cosyvoice.versions`).

v2 (instruct2) reads ``"<instruction><|endofprompt|>"``; v3 reads ``"You are a helpful assistant.
<instruction><|endofprompt|>"``; v1 (300M-Instruct) reads ``"<instruction><endofprompt>"``. The engine
formats with its model's version (from the manifest, :mod:`cosyedge.catalog.manifest`);
:mod:`cosyedge.instruct.plan` asks the engine for it.
"""

from __future__ import annotations

import re

from cosyedge.engines.cosyvoice import versions

#: Written after a v1 instruction (upstream cosyvoice/cli/frontend.py @46dfe04, frontend_instruct);
#: removed from every instruction before formatting, like the special tokens.
V1_END = "<endofprompt>"
_SPECIAL_TOKEN = re.compile(r"<\|[^|>]*\|>")


def format_instruction(instruction: str, version: int) -> str:
    """``instruction`` as a CosyVoice ``version`` model expects it. Special tokens typed by the user
    (``<|...|>``) are removed first, so formatting twice gives the same text and cannot be spoofed."""
    described = versions.description(version)  # a coded refusal for a version there is none of
    text = _SPECIAL_TOKEN.sub(" ", instruction.replace(V1_END, " "))
    text = re.sub(r"\s+", " ", text).strip()
    return described.format_instruction(text)
