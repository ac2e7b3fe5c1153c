"""Shared fixtures. Real-model fixtures assemble models/kokoro-int8 once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def kokoro_models_dir(tmp_path_factory) -> Path:
    """A models/ directory holding the real embedded model (assembled from the PyPI packages)."""
    from cosyedge.engines.kokoro import model_files

    repo_models = REPO / "models"
    if (repo_models / model_files.MODEL_ID / "manifest.json").is_file():
        return repo_models
    models = tmp_path_factory.mktemp("models")
    model_files.assemble(models)
    return models


@pytest.fixture(scope="session")
def kokoro_engine(kokoro_models_dir):
    """The real Kokoro engine, loaded once (2 threads)."""
    from cosyedge import config
    from cosyedge.engines import load_engine

    return load_engine(config.from_env({}, models_dir=kokoro_models_dir, onnx_threads=2))
