"""Engines: the embedded Kokoro engine and the CosyVoice ONNX engine, behind one protocol."""

from __future__ import annotations

import logging

from cosyedge.config import Settings
from cosyedge.engines.base import Engine
from cosyedge.errors import ModelMissingError
from cosyedge.manifest import read_manifest

logger = logging.getLogger(__name__)

#: What each engine does natively, (clone, instruct), by the manifest's engine name: known before
#: the engine loads, so the page can say it up front. Each engine's own ``capabilities`` agree
#: (tests/test_kokoro_real.py, tests/cosyvoice/test_engine.py).
NATIVE_ABILITIES: dict[str, tuple[bool, bool]] = {"kokoro": (False, False), "cosyvoice2": (True, True)}


def load_engine(settings: Settings) -> Engine:
    """Load the engine named by ``models/<settings.model>/manifest.json`` (heavy: sessions, weights)."""
    hint = ("run `python -m cosyedge setup-model`" if settings.model == "kokoro-int8"
            else f"convert a checkpoint into {settings.model_path} with `python -m cosyedge convert`")
    engine_name = read_manifest(settings.model_path, hint)["engine"]
    if engine_name == "kokoro":
        from cosyedge.engines.kokoro.engine import KokoroEngine

        return KokoroEngine.load(settings.model_path, settings)
    if engine_name == "cosyvoice2":
        from cosyedge.engines.cosyvoice.engine import CosyVoiceEngine

        return CosyVoiceEngine.load(settings.model_path, settings)
    raise ModelMissingError(f"{settings.model_path}/manifest.json names unknown engine {engine_name!r}")
