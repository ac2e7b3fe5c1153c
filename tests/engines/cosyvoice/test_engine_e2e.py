"""The shared synthesis path on the tiny converted CosyVoice2 model, in the reference environment.

The model is the tiny official-layout checkpoint converted with int8 (random weights: the output is
noise), taken from the test-artifacts cache (tests/helpers/tiny_models.py) and built first when that
is stale; the test checks plumbing and durations of a clone with and without an instruction. The
same model is driven through the app's own environment (.venv) by tests/commands/test_cli_cosyvoice.py
(CLI) and tests/web/test_api_cosyvoice.py (REST server).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="building the tiny checkpoint needs the reference: scripts/install_reference.sh")
pytestmark = [pytest.mark.reference, pytest.mark.slow]  # builds (once, cached), converts and runs tiny models

from cosyedge.service import synthesis  # noqa: E402
from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from tests.helpers.cosyvoice_tiny import cached_models_dir  # noqa: E402
from tests.helpers.tiny_models import MODEL_ID  # noqa: E402


@pytest.fixture(scope="module")
def models_dir():
    return cached_models_dir()


@pytest.mark.parametrize("instruct", [None, "用开心的语气说"])
def test_clone_and_instruct_through_the_shared_synthesis_path(models_dir, instruct):
    engine = load_engine(Settings(models_dir=models_dir, model=MODEL_ID, onnx_threads=1))
    try:
        t = np.arange(4 * 16000) / 16000
        voice = engine.encode_prompt((0.2 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 16000,
                                     "Hello world, this is a tiny test.")
        result = synthesis.synthesize(engine, "今天天气很好。我们去公园散步吧！", voice,
                                      SynthesisOptions(instruct=instruct, seed=4), max_chars=5000)
        assert result.sample_rate == 24000 and result.sentences
        assert result.audio.dtype == np.float32 and 0.2 < result.duration < 60
        assert np.isfinite(result.audio).all()
    finally:
        engine.close()
