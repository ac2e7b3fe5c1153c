"""The app's entry points on a converted tiny CosyVoice2 model: CLI ``speak --model`` and the shared
synthesis path (clone and instruct requests), as far as main offers them today.

The model is the tiny official-layout checkpoint converted with int8 (random weights: the output is
noise); the tests check plumbing, durations and errors. REST/UI requests with prompt audio and
instructions are wired by the web app on top of the same Engine protocol (see the lead's e2e tests).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="building the tiny checkpoint needs the reference: scripts/install_reference.sh")
pytestmark = pytest.mark.slow  # builds, converts and runs tiny models (~10-40 s)

import soundfile as sf  # noqa: E402

from cosyedge import synthesis  # noqa: E402
from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines import load_engine  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from tests.cosyvoice._tiny_checkpoint import PRESET_NAMES, converted_models_dir  # noqa: E402

MODEL_ID = "cosyvoice2-tiny"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return converted_models_dir(tmp_path_factory, MODEL_ID)


def _speak(models_dir, *args):
    env = dict(os.environ, PYTHONPATH=os.getcwd(), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([sys.executable, "-m", "cosyedge", "speak", "--models-dir", str(models_dir),
                           "--model", MODEL_ID, *args], capture_output=True, text=True, env=env, timeout=300)


def test_cli_speak_with_a_cosyvoice_preset(models_dir, tmp_path):
    out = tmp_path / "preset.wav"
    run = _speak(models_dir, "Hello world. The quick brown fox!", "--voice", PRESET_NAMES[1], "-o", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    audio, sr = sf.read(out)
    assert sr == 24000 and audio.ndim == 1 and 0.2 < audio.size / sr < 30
    assert "wrote" in run.stdout


def test_cli_speak_errors_are_one_line_reasons(models_dir, tmp_path):
    run = _speak(models_dir, "Hello.", "--voice", "nobody", "-o", str(tmp_path / "x.wav"))
    assert run.returncode == 2 and "nobody" in run.stderr and "Traceback" not in run.stderr
    run = _speak(models_dir, "Hello.", "--model", "missing-model", "-o", str(tmp_path / "y.wav"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()


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
