"""The REST server (``python app.py``) on the tiny converted CosyVoice2 model, in the app's environment.

``COSYEDGE_MODEL`` names the tiny model (random weights: the output is noise); the tests check
plumbing, durations and errors: a clone and an instruct request with prompt audio, a preset request,
the voice listing and bad requests. The model comes from the ``tiny_cosyvoice_models`` fixture
(built in .venv-ref by scripts/test.sh).
"""

from __future__ import annotations

import base64
import io

import httpx
import pytest
import soundfile as sf

from tests.helpers.cosyvoice_app import app_process, prompt_b64
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

pytestmark = pytest.mark.slow  # starts the whole app in its own process (~10-30 s)


@pytest.fixture(scope="module")
def app_server(tiny_cosyvoice_models, tmp_path_factory):
    """The real server (``python app.py``) with the tiny CosyVoice model selected by COSYEDGE_MODEL."""
    with app_process(tiny_cosyvoice_models, MODEL_ID, tmp_path_factory.mktemp("app")) as url:
        yield url


def _post(url: str, body: dict) -> tuple[int, dict | str]:
    r = httpx.post(url, json=body, timeout=600)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


@pytest.mark.parametrize("instruct", [None, "Read this slowly and warmly."])
def test_rest_clone_and_instruct(app_server, instruct):
    body = {"text": "Hello world. The quick brown fox!", "consent": True, "prompt_audio": prompt_b64(),
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
