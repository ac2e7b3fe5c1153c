"""Which CosyVoice versions this runtime runs: one line per version, naming its engine class and its
version description (the module of what that version does its own way).

The registry is the only place under ``engines/cosyvoice/`` that names the version folders; the shared
parts (``common/``) ask it for a version's description instead of importing a folder. Modules are
named by dotted path and imported when first asked for, so reading the registry imports no version
(and no cycle through ``common/``). Adding a version: a ``vN/`` folder with its ``version.py`` (and
what else differs) plus one line in :data:`VERSIONS`; the manifest schema's version list
(:data:`cosyedge.catalog.manifest.FAMILY_VERSIONS`) and the converter's registry
(:mod:`cosyedge.export.cosyvoice.versions`) get theirs.

A version description is a module with the members of :class:`VersionDescription`; one that the
CosyVoice2-form engine (``common/engine.py``) runs also has those of :class:`Cosy2FormDescription`.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Protocol, Sequence

from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)


class VersionDescription(Protocol):
    """What every version's ``version.py`` says."""

    VERSION: int
    #: The languages its capabilities list ("auto" first).
    LANGUAGES: tuple[str, ...]

    def format_instruction(self, text: str) -> str:
        """A cleaned instruction (no special tokens) in the prompt format this version's LLM reads."""

    def spell_reading(self, entry: Any) -> tuple[str | None, str]:
        """What the LLM reads in place of a pronunciation entry's word (``lexicon.entries.Entry``),
        or None and why this version cannot honour it (``common.readings``)."""


class Cosy2FormDescription(VersionDescription, Protocol):
    """What a version run by the CosyVoice2-form engine adds (v2 is the form; v3 follows it)."""

    #: The special tokens added to the Qwen2 text tokenizer.
    SPECIALS: Sequence[str]
    #: True when every LLM input must carry ``<|endofprompt|>`` (a sentence without a prompt text
    #: then goes through :meth:`cross_lingual_text`).
    EVERY_INPUT_ENDS_PROMPT: bool

    def load_token2wav(self, model: Any, threads: int = 0) -> Any:
        """The flow + vocoder of an opened model directory (``common.manifest.ModelDir``)."""

    def zero_shot_prompt(self, transcript: str) -> str:
        """The LLM prompt text of a zero-shot clone from the prompt's transcript."""

    def cross_lingual_text(self, sentence: str) -> str:
        """A sentence as the LLM reads it when there is no prompt text."""

    def speech_tokens(self, tokens: Sequence[int]) -> Sequence[int]:
        """The LLM's speech tokens as the flow is given them."""


@dataclass(frozen=True)
class Version:
    """One registry line: the version's number, its engine class and its description, as
    ``"module:Class"`` and ``"module"`` paths."""

    number: int
    engine: str
    description: str


_COMMON_ENGINE = "cosyedge.engines.cosyvoice.common.engine:CosyVoiceEngine"

#: Every CosyVoice version this runtime runs, by the manifest's ``version``.
VERSIONS: dict[int, Version] = {v.number: v for v in (
    Version(1, "cosyedge.engines.cosyvoice.v1.engine:CosyVoice1Engine", "cosyedge.engines.cosyvoice.v1.version"),
    Version(2, _COMMON_ENGINE, "cosyedge.engines.cosyvoice.v2.version"),
    Version(3, _COMMON_ENGINE, "cosyedge.engines.cosyvoice.v3.version"),
)}


def _entry(version: int | None) -> Version:
    """The registry line of ``version``, or the coded refusal naming the versions there are."""
    try:
        entry = VERSIONS.get(version)  # type: ignore[arg-type]
    except TypeError:  # unhashable
        entry = None
    if entry is None:
        known = tuple(VERSIONS)
        raise ParameterError(f"CosyVoice version {version!r} must be one of {', '.join(map(str, known))}",
                             code="model_version_unknown", model_version=version, choices=known)
    return entry


def description(version: int) -> ModuleType:
    """The version description module of ``version`` (imported on first use)."""
    return importlib.import_module(_entry(version).description)


def engine_class(version: int) -> Callable[..., Any]:
    """The engine class that runs ``version`` (its module imported on first use)."""
    module, _, name = _entry(version).engine.partition(":")
    return getattr(importlib.import_module(module), name)
