"""The REST server (``python app.py``) on the tiny converted CosyVoice-300M-Instruct model, end to end.

The Instruct model offers every v1 mode (random weights: the output is noise); the tests send an sft,
a zero-shot, a cross-lingual and an instruct request through ``POST /tts``, the OpenAI route with a
seed/OpenAI voice name, and check /voices' presets and details and the refusal of a cloned voice with
an instruction (v1 instruct reads a preset speaker). The model comes from the ``tiny_cosyvoice_models``
fixture (built in .venv-ref by scripts/test.sh).
"""

from __future__ import annotations

import base64
import io

import httpx
import pytest
import soundfile as sf

from tests.helpers.cosyvoice_app import app_process, prompt_b64

pytestmark = pytest.mark.slow  # starts the whole app in its own process
MODEL = "cosyvoice1-instruct-tiny"


@pytest.fixture(scope="module")
def app_server(tiny_cosyvoice_models, tmp_path_factory):
    with app_process(tiny_cosyvoice_models, MODEL, tmp_path_factory.mktemp("app")) as url:
        yield url


def _tts(url: str, body: dict) -> tuple[int, dict]:
    r = httpx.post(f"{url}/tts", json=body, timeout=600)
    return r.status_code, r.json()


@pytest.mark.parametrize("mode,body", [
    ("sft", {"speaker": "中文女"}),
    ("sft", {"speaker": "male_1"}),
    ("zero_shot", {"prompt_audio": "PROMPT", "prompt_text": "希望你以后能够做的比我还好呦。", "consent": True}),
    ("cross_lingual", {"prompt_audio": "PROMPT", "consent": True}),
    ("instruct", {"speaker": "中文男", "instruct": "Theo 'Crimson', is a fiery, passionate rebel leader."}),
])
def test_rest_runs_every_v1_mode(app_server, mode, body):
    body = {k: (prompt_b64() if v == "PROMPT" else v) for k, v in body.items()}
    status, reply = _tts(app_server, {"text": "你好，世界。<|en|>Hello there.", **body})
    assert status == 200, reply
    assert reply["engine"] == "cosyvoice1" and reply["model"] == MODEL
    audio, sr = sf.read(io.BytesIO(base64.b64decode(reply["audio"])))
    assert sr == reply["sample_rate"] == 22050
    assert len(audio) / sr == pytest.approx(reply["duration"], abs=1e-3) and reply["duration"] > 0.05
    if mode == "instruct":
        controls = reply["instruct"]["controls"]
        assert controls["native"] is True and controls["native_instruction"].endswith("<endofprompt>")


def test_voices_lists_the_sft_speakers_and_the_seed_mapping(app_server):
    httpx.post(f"{app_server}/tts", json={"text": "你好。", "speaker": "中文女"}, timeout=600)  # loads the engine
    voices = httpx.get(f"{app_server}/voices", timeout=60).json()
    assert voices["presets"][:7] == ["中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女"]
    assert voices["presets"][7:] == ["female_1", "female_2", "male_1", "male_2"]
    details = {d["name"]: d for d in voices["preset_details"]}
    assert details["female_1"]["made_of"]["zh"] == {"speaker": "中文女"}
    assert details["child"]["made_of"] == {} and "no child speaker" in details["child"]["note"]
    assert voices["native_clone"] is True and voices["native_instruct"] is True


def test_openai_route_maps_its_voice_names_to_sft_speakers(app_server):
    r = httpx.post(f"{app_server}/v1/audio/speech", timeout=600,
                   json={"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "wav"})
    assert r.status_code == 200, r.text
    audio, sr = sf.read(io.BytesIO(r.content))
    assert sr == 22050 and audio.size / sr > 0.05


def test_cloned_voice_with_an_instruction_is_refused_naming_the_mode(app_server):
    status, reply = _tts(app_server, {"text": "你好。", "prompt_audio": prompt_b64(), "prompt_text": "测试。",
                                      "instruct": "Speak like a pirate.", "consent": True})
    assert status == 400, reply
    assert reply["error"]["code"] == "mode_not_supported" and "instruct mode" in reply["error"]["message"]
    status, reply = _tts(app_server, {"text": "你好。", "speaker": "child"})
    assert status == 404 and "child" in reply["error"]["message"]
