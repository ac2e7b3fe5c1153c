"""The app (REST server, ``python app.py``) and the CLI on the converted tiny CosyVoice3 model.

Random weights: the output is noise; the tests check plumbing, shapes, durations and errors for a
zero-shot clone, a cross-lingual clone and an instruct request, the v3-only languages (spoken here,
refused by name by the other engines) and the voice listing. The model is the committed upstream
fixture converted with int8 (tests/helpers/cosyvoice3_fixture.py; scripts/test.sh builds it in .venv-ref).
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.helpers import REPO
from tests.helpers import cosyvoice3_fixture as fixture
from tests.helpers.cosyvoice_app import app_process, prompt_b64, prompt_wav

pytestmark = pytest.mark.slow  # starts the whole app, and CLI processes, on the tiny model
MODEL_ID = fixture.MODEL_IDS["int8"]
TRANSCRIPT = "Hello world, this is a tiny test."


@pytest.fixture(scope="module")
def app_server(tiny_cosyvoice3_models, tmp_path_factory):
    with app_process(tiny_cosyvoice3_models, MODEL_ID, tmp_path_factory.mktemp("app")) as url:
        yield url


def _tts(url: str, **fields) -> tuple[int, dict]:
    # Several sentences: a random v3 model may end a sentence at its first step (upstream's rule).
    body = {"text": "Hello world. The quick brown fox! Good night. See you soon.",
            "prompt_audio": prompt_b64(), "consent": True, **fields}
    r = httpx.post(f"{url}/tts", json=body, timeout=600)
    return r.status_code, r.json()


@pytest.mark.parametrize("fields, mode", [
    ({"prompt_text": TRANSCRIPT}, "zero-shot"),
    ({}, "cross-lingual"),
    ({"instruct": "请用四川话说这句话"}, "instruct"),
    ({"text": "안녕하세요. 만나서 반갑습니다. 좋은 아침입니다. 감사합니다.", "language": "ko"}, "cross-lingual, Korean"),
])
def test_rest_modes(app_server, fields, mode):
    status, reply = _tts(app_server, **fields)
    assert status == 200, (mode, reply)
    assert reply["engine"] == "cosyvoice3" and reply["model"] == MODEL_ID
    audio, sr = sf.read(io.BytesIO(base64.b64decode(reply["audio"])))
    assert sr == reply["sample_rate"] == 24000 and audio.ndim == 1
    assert audio.size % 480 == 0 and np.isfinite(audio).all()  # whole mel frames, 480 samples each
    assert reply["duration"] == pytest.approx(audio.size / sr, abs=0.05)


def test_rest_voices_lists_the_models_languages(app_server):
    voices = httpx.get(f"{app_server}/voices", timeout=30).json()
    assert voices["native_clone"] is True and voices["native_instruct"] is True
    assert set(voices["languages"] or []) >= {"zh", "en", "ja", "ko", "de", "es", "fr", "it", "ru"} \
        or voices["languages"] is None  # listed once the engine has loaded (after the requests above)


def test_rest_bad_input(app_server):
    status, reply = _tts(app_server, language="xx")
    assert status == 400 and "language" in str(reply["error"]), reply
    status, reply = _tts(app_server, instruct="x" * 5000)
    assert status == 400 and "instruction" in reply["error"]["message"]


def test_other_engines_refuse_v3_languages_by_name(make_service):
    from cosyedge.service.requests import TTSRequest
    from cosyedge.errors import ParameterError

    service = make_service()
    prepared = service.prepare(TTSRequest(text="Hallo Welt.", language="de"))  # a language cosyedge knows
    with service.holder.use() as engine, pytest.raises(ParameterError) as err:
        service.resolve(engine, prepared)
    assert err.value.code == "language_not_supported" and "'de'" in err.value.message
    assert "fake" in err.value.message


def _cosyedge(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([sys.executable, "-m", "cosyedge", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_cli_zero_shot_cross_lingual_and_instruct(tiny_cosyvoice3_models, tmp_path):
    prompt = tmp_path / "me.wav"
    prompt.write_bytes(prompt_wav(4.0))
    prompts = tmp_path / "prompts"
    common = ["--models-dir", str(tiny_cosyvoice3_models), "--prompts-dir", str(prompts), "--model", MODEL_ID]
    for name, transcript in (("Clone", ["--transcript", TRANSCRIPT]), ("Accent", [])):
        saved = _cosyedge("library", "save", name, str(prompt), *transcript, "--consent", *common)
        assert saved.returncode == 0, saved.stderr[-2000:]
    listed = _cosyedge("library", "list", *common)
    ids = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    clone = next(i for i, line in ids.items() if "Clone" in line)
    accent = next(i for i, line in ids.items() if "Accent" in line)
    for voice, extra in ((clone, []), (accent, ["--lang", "fr"]), (clone, ["--instruct", "请非常开心地说一句话"])):
        out = tmp_path / f"{voice}-{len(extra)}.wav"
        run = _cosyedge("speak", "Bonjour. Hello world! Good night. See you.", "--voice-id", voice, *extra, "-o", str(out), *common)
        assert run.returncode == 0, run.stderr[-2000:]
        audio, sr = sf.read(out)
        assert sr == 24000 and audio.size > 0 and "wrote" in run.stdout
    run = _cosyedge("speak", "Hello.", "--voice-id", "nobody", "-o", str(tmp_path / "x.wav"), *common)
    assert run.returncode == 2 and "Traceback" not in run.stderr and not (tmp_path / "x.wav").exists()
