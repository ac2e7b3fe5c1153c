"""The REST server (``python app.py``) on the tiny converted CosyVoice2 model, in the app's environment.

``COSYEDGE_MODEL`` names the tiny model (random weights: the output is noise); the tests check
plumbing, durations and errors: a clone and an instruct request with prompt audio, a preset request,
the voice listing and bad requests. The model comes from the ``tiny_cosyvoice_models`` fixture
(built in .venv-ref by scripts/test.sh).
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.helpers import REPO
from tests.helpers.live_server import free_port, stop_process
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

pytestmark = pytest.mark.slow  # starts the whole app in its own process (~10-30 s)


@pytest.fixture(scope="module")
def app_server(tiny_cosyvoice_models, tmp_path_factory):
    """The real server (``python app.py``) with the tiny CosyVoice model selected by COSYEDGE_MODEL."""
    port = free_port()
    env = {**os.environ, "COSYEDGE_MODELS_DIR": str(tiny_cosyvoice_models), "COSYEDGE_MODEL": MODEL_ID,
           "COSYEDGE_OUTPUTS_DIR": str(tmp_path_factory.mktemp("outputs")),
           "COSYEDGE_PROMPTS_DIR": str(tmp_path_factory.mktemp("prompts")), "COSYEDGE_LOG_LEVEL": "WARNING",
           "COSYEDGE_ONNX_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not come up"
            time.sleep(0.3)
        yield url
    finally:
        stop_process(proc)


def _wav_b64(seconds: float = 3.0, sr: int = 16000) -> str:
    t = np.arange(int(sr * seconds)) / sr
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 160 * t)).astype(np.float32), sr, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def _post(url: str, body: dict) -> tuple[int, dict | str]:
    r = httpx.post(url, json=body, timeout=600)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


@pytest.mark.parametrize("instruct", [None, "Read this slowly and warmly."])
def test_rest_clone_and_instruct(app_server, instruct):
    body = {"text": "Hello world. The quick brown fox!", "consent": True, "prompt_audio": _wav_b64(),
            "prompt_text": "Hello world, this is a tiny test."}
    if instruct:
        body["instruct"] = instruct
    status, reply = _post(f"{app_server}/tts", body)
    assert status == 200, reply
    assert reply["engine"] == "cosyvoice2" and reply["model"] == MODEL_ID
    audio, sr = sf.read(io.BytesIO(base64.b64decode(reply["audio"])))
    assert sr == reply["sample_rate"] == 24000
    assert len(audio) / sr == pytest.approx(reply["duration"], abs=1e-3) and reply["duration"] > 0.2


def test_rest_preset_list_and_errors(app_server):
    status, reply = _post(f"{app_server}/tts", {"text": "Hello world.", "speaker": PRESET_NAMES[0]})
    assert status == 200, reply
    assert reply["voice"] == PRESET_NAMES[0]
    voices = httpx.get(f"{app_server}/voices", timeout=60)
    assert voices.status_code == 200 and voices.json()["presets"] == sorted(PRESET_NAMES)
    assert voices.json()["native_clone"] is True and voices.json()["native_instruct"] is True
    status, reply = _post(f"{app_server}/tts", {"text": "Hello.", "speaker": "nobody"})
    assert status in (400, 404) and "nobody" in str(reply)
    status, _ = _post(f"{app_server}/tts", {"text": "Hello.", "consent": True, "prompt_audio": "bm90IGF1ZGlv"})
    assert status == 400
