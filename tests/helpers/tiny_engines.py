"""The tiny converted CosyVoice models' engines, loaded as the app loads them (for .venv tests that
drive an engine directly; the models come from the ``tiny_cosyvoice_models`` / ``tiny_cosyvoice3_models``
fixtures)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.tiny_models import MODEL_ID


def open_engine(models: Path, model_id: str = MODEL_ID):
    """One thread, no thread calibration (it would run the flow itself and write into the shared
    model folder)."""
    from cosyedge.config import Settings
    from cosyedge.engines.loader import load_engine

    return load_engine(Settings(models_dir=models, model=model_id, onnx_threads=1, thread_calibration=False))
