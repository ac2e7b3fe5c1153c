"""The app's entry points on a converted tiny CosyVoice2 model: CLI ``speak --model``, the shared
synthesis path and the REST server (clone and instruct requests).

The model is the tiny official-layout checkpoint converted with int8 (random weights: the output is
noise); the tests check plumbing, durations and errors. The REST tests run the real server
(``python app.py``) with ``COSYEDGE_MODEL`` naming the tiny model: a clone and an instruct request with
prompt audio, a preset request, the voice listing and bad requests. The browser UI is not driven here.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from tests.helpers import REPO

pytest.importorskip("torch", reason="building the tiny checkpoint needs the reference: scripts/install_reference.sh")
pytestmark = [pytest.mark.reference, pytest.mark.slow]  # builds, converts and runs tiny models (~10-40 s)

import soundfile as sf  # noqa: E402

from cosyedge import synthesis  # noqa: E402
from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines import load_engine  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from tests.helpers.cosyvoice_tiny import PRESET_NAMES, converted_models_dir  # noqa: E402

MODEL_ID = "cosyvoice2-tiny"
#: The CLI and the server run in the app's own environment (.venv: web stack, no torch) when it exists;
#: these tests themselves run in .venv-ref, which has the PyTorch reference that builds the tiny model.
APP_PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() \
    else sys.executable


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return converted_models_dir(tmp_path_factory, MODEL_ID)


def _speak(models_dir, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([APP_PYTHON, "-m", "cosyedge", "speak", "--models-dir", str(models_dir),
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


def _http(method: str, url: str, body: dict | None = None, timeout: float = 600) -> tuple[int, dict | str]:
    """A tiny stdlib HTTP client (the reference venv has no httpx): (status, JSON or text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.fixture(scope="module")
def app_server(models_dir, tmp_path_factory):
    """The real server (``python app.py``) with the tiny CosyVoice model selected by COSYEDGE_MODEL."""
    from tests.helpers.live_server import free_port

    probe = subprocess.run([APP_PYTHON, "-c", "import gradio, fastapi, uvicorn"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"{APP_PYTHON} has no web stack (run scripts/setup.sh --dev to create .venv)")
    port = free_port()
    env = {**os.environ, "COSYEDGE_MODELS_DIR": str(models_dir), "COSYEDGE_MODEL": MODEL_ID,
           "COSYEDGE_OUTPUTS_DIR": str(tmp_path_factory.mktemp("outputs")),
           "COSYEDGE_PROMPTS_DIR": str(tmp_path_factory.mktemp("prompts")), "COSYEDGE_LOG_LEVEL": "WARNING",
           "COSYEDGE_ONNX_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([APP_PYTHON, "app.py", "--port", str(port)], env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if _http("GET", f"{url}/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not come up"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wav_b64(seconds: float = 3.0, sr: int = 16000) -> str:
    t = np.arange(int(sr * seconds)) / sr
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 160 * t)).astype(np.float32), sr, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("instruct", [None, "Read this slowly and warmly."])
def test_rest_clone_and_instruct(app_server, instruct):
    body = {"text": "Hello world. The quick brown fox!", "prompt_audio": _wav_b64(),
            "prompt_text": "Hello world, this is a tiny test."}
    if instruct:
        body["instruct"] = instruct
    status, reply = _http("POST", f"{app_server}/tts", body)
    assert status == 200, reply
    assert reply["engine"] == "cosyvoice2" and reply["model"] == MODEL_ID
    audio, sr = sf.read(io.BytesIO(base64.b64decode(reply["audio"])))
    assert sr == reply["sample_rate"] == 24000
    assert len(audio) / sr == pytest.approx(reply["duration"], abs=1e-3) and reply["duration"] > 0.2


def test_rest_preset_list_and_errors(app_server):
    status, reply = _http("POST", f"{app_server}/tts", {"text": "Hello world.", "speaker": PRESET_NAMES[0]})
    assert status == 200, reply
    assert reply["voice"] == PRESET_NAMES[0]
    status, voices = _http("GET", f"{app_server}/voices")
    assert status == 200 and voices["presets"] == sorted(PRESET_NAMES)
    assert voices["native_clone"] is True and voices["native_instruct"] is True
    status, reply = _http("POST", f"{app_server}/tts", {"text": "Hello.", "speaker": "nobody"})
    assert status in (400, 404) and "nobody" in str(reply)
    status, _ = _http("POST", f"{app_server}/tts", {"text": "Hello.", "prompt_audio": "bm90IGF1ZGlv"})
    assert status == 400


def _library(models_dir, prompts_dir, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([APP_PYTHON, "-m", "cosyedge", "library", *args, "--models-dir", str(models_dir),
                           "--prompts-dir", str(prompts_dir), "--model", MODEL_ID],
                          capture_output=True, text=True, env=env, timeout=300)


def test_cli_clone_from_a_saved_voice_with_an_instruction(models_dir, tmp_path):
    """The CLI path of a clone + instruct request: `library save` a prompt, then `speak --voice-id
    --instruct`; the engine gets the native instruction, the output is a WAV of plausible length."""
    prompt = tmp_path / "me.wav"
    t = np.arange(4 * 16000) / 16000
    sf.write(prompt, (0.3 * np.sin(2 * np.pi * 160 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
                      ).astype(np.float32), 16000)
    prompts_dir = tmp_path / "prompts"
    saved = _library(models_dir, prompts_dir, "save", "Teacher", str(prompt),
                     "--transcript", "Hello world, this is a tiny test.")
    assert saved.returncode == 0, saved.stderr[-2000:]
    listed = _library(models_dir, prompts_dir, "list")
    assert listed.returncode == 0 and "Teacher" in listed.stdout, listed.stdout + listed.stderr
    voice_id = next(line.split()[0] for line in listed.stdout.splitlines() if "Teacher" in line)
    out = tmp_path / "clone.wav"
    run = _speak(models_dir, "Hello world. The quick brown fox!", "--voice-id", voice_id,
                 "--prompts-dir", str(prompts_dir), "--instruct", "用开心的语气说", "-o", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    audio, sr = sf.read(out)
    assert sr == 24000 and 0.2 < audio.size / sr < 30
    assert "wrote" in run.stdout
