"""Which CosyVoice versions the converter writes: one line per ``python -m cosyedge convert`` family,
naming the version folder's ``convert`` module and how it is called.

The command (:mod:`cosyedge.commands.convert`) converts through :func:`convert` here; modules are named
by dotted path and imported when converting, so reading the registry imports no torch and no version.
Adding a version: a ``vN/`` folder with its ``convert.py`` (a :class:`~.common.pipeline.ModelSpec` and
a ``convert`` function) plus one line in :data:`CONVERTERS`, and its name among the command's families.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Converter:
    """One registry line: the command's family name, the manifest version it writes, its module, the
    ``--quantize`` it uses when none is given, and whether it takes the LLM options (``llm_bits``,
    ``speech_tokenizer_int8``) and a ``--variant`` (v1's)."""

    family: str
    version: int
    module: str
    default_quantize: str
    llm_options: bool = True
    variants: bool = False


#: Every version the converter writes, by the command's family name.
CONVERTERS: dict[str, Converter] = {c.family: c for c in (
    Converter("cosyvoice2", 2, "cosyedge.export.cosyvoice.v2.convert", "none"),
    Converter("cosyvoice3", 3, "cosyedge.export.cosyvoice.v3.convert", "int8"),
    Converter("cosyvoice1", 1, "cosyedge.export.cosyvoice.v1.convert", "int8", variants=True),
)}


def convert(family: str, src: Path, out: Path, *, quantize: str | None = None, steps: list[str] | None = None,
            force: bool = False, variant: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Convert ``src`` into ``out`` with ``family``'s converter; returns the manifest written there.
    ``variant`` goes to a converter with variants only, ``options`` (checked before any step) to one
    with the LLM options only, as the command's help says."""
    entry = CONVERTERS[family]
    quantize = quantize or entry.default_quantize
    chosen: dict[str, Any] = {}
    if entry.llm_options:
        from cosyedge.export.cosyvoice.common.llm import check_options

        options = dict(options or {})
        check_options(quantize, options)  # before minutes of flow/HiFT export
        chosen = {k: v for k, v in options.items() if v}
    module = importlib.import_module(entry.module)
    extra = {"variant": variant} if entry.variants else {}
    return module.convert(src, out, quantize=quantize, steps=steps, force=force, options=chosen, **extra)
