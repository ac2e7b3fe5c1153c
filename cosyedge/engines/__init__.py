"""Engines: the embedded Kokoro engine and the CosyVoice ONNX engine, behind one protocol."""

from __future__ import annotations

import json
import logging

from cosyedge.config import Settings
from cosyedge.engines.base import Engine
from cosyedge.errors import ModelMissingError

logger = logging.getLogger(__name__)


def load_engine(settings: Settings) -> Engine:
    """Load the engine named by ``models/<settings.model>/manifest.json`` (heavy: sessions, weights)."""
    manifest_path = settings.model_path / "manifest.json"
    if not manifest_path.is_file():
        hint = ("run `python -m cosyedge setup-model`" if settings.model == "kokoro-int8"
                else f"convert a checkpoint into {settings.model_path} with `python -m cosyedge convert`")
        raise ModelMissingError(f"model {settings.model!r} not found at {settings.model_path}: {hint}")
    try:
        engine_name = json.loads(manifest_path.read_text(encoding="utf-8"))["engine"]
    except (ValueError, KeyError) as exc:
        raise ModelMissingError(f"{manifest_path} is unreadable ({exc}); recreate the model directory") from exc
    if engine_name == "kokoro":
        from cosyedge.engines.kokoro.engine import KokoroEngine

        return KokoroEngine.load(settings.model_path, settings)
    if engine_name == "cosyvoice2":
        from cosyedge.engines.cosyvoice.engine import CosyVoiceEngine

        return CosyVoiceEngine.load(settings.model_path, settings)
    raise ModelMissingError(f"{manifest_path} names unknown engine {engine_name!r}")
