"""REST API against a live uvicorn server on 127.0.0.1 (fake sine engine)."""

from __future__ import annotations

import base64
import dataclasses
import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf


def wav_b64(seconds: float = 1.0) -> str:
    buf = io.BytesIO()
    t = np.arange(int(seconds * 16000)) / 16000
    sf.write(buf, 0.2 * np.sin(2 * np.pi * 220 * t), 16000, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def test_tts_returns_a_wav_whose_duration_matches(server):
    r = httpx.post(f"{server.url}/tts", json={"text": "[en]Hello world. It's sunny today!",
                                              "speaker": "female_1", "speed": 1.0}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == body["sample_rate"] == 24000
    assert len(audio) / rate == pytest.approx(body["duration"], abs=1e-3)
    assert body["duration"] > 0.3
    assert body["voice"] == "female_1" and body["voice_match"] == "preset"


def test_tts_extensions_are_reported_honestly(server):
    r = httpx.post(f"{server.url}/tts", json={"text": "你好。", "speaker": "child", "speed": 1.2,
                                              "language": "zh", "instruct": "用开心的语气说",
                                              "consent": True, "prompt_audio": wav_b64(4.0),
                                              "prompt_text": "hello"},
                   timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["voice"] == "prompt audio" and body["voice_match"] == "closest built-in voice / 最接近的内置音色"
    assert -1.0 <= body["similarity"] <= 1.0
    assert body["instruct"]["applied"] == ["emotion 'happy' ('开心') approximated by speed ×1.08, "
                                           "pitch +1.0 st"]
    assert body["instruct"]["not_supported"] == []
    assert body["instruct"]["controls"]["speed"] == 1.08
    r = httpx.post(f"{server.url}/tts", json={"text": "你好。", "instruct": "用四川话说"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["instruct"]["not_supported"] == ["dialect: Sichuanese (not supported by this engine)"]
    assert r.json()["duration"] > 0.1  # still synthesized


def test_openai_client_speech(server, tmp_path):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    for fmt in ("wav", "mp3", "opus", "flac"):
        response = client.audio.speech.create(model="tts-1", voice="male_1", input="Hello there.",
                                              response_format=fmt)
        path = tmp_path / f"out.{fmt}"
        response.write_to_file(path)
        audio, rate = sf.read(path)
        assert len(audio) / rate > 0.2, fmt
    pcm = client.audio.speech.create(model="tts-1", voice="male_1", input="Hello there.",
                                     response_format="pcm", speed=2.0)
    samples = np.frombuffer(pcm.content, dtype="<i2")
    wav = client.audio.speech.create(model="tts-1", voice="male_1", input="Hello there.",
                                     response_format="wav", speed=2.0)
    audio, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert np.array_equal(samples, audio)  # pcm is the same audio without the header
    assert pcm.response.headers["x-cosyedge-sample-rate"] == "24000"


def test_openai_client_errors_are_4xx(server):
    import openai
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.speech.create(model="tts-1", voice="robot", input="Hello.")
    assert "robot" in str(info.value) and "female_1" in str(info.value)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="male_1", input="Hello.", speed=4.0)


def test_openai_voice_names_map_to_presets_and_say_which(server):
    """An OpenAI client's default voice ("alloy") was a 404; now the nearest preset, named in the
    report header."""
    import json

    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    for voice, preset in (("alloy", "female_1"), ("onyx", "male_1"), ("Female_2", "female_2")):
        response = client.audio.speech.create(model="tts-1", voice=voice, input="Hello.",
                                              response_format="wav")
        assert json.loads(response.response.headers["x-cosyedge-report"])["voice"] == preset, voice
        assert len(response.content) > 1000


def test_odd_bodies_are_named(server):
    r = httpx.post(f"{server.url}/tts", content='{"text": "caf\u00e9"}'.encode("latin-1"),
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not UTF-8" in r.json()["error"]["message"], r.text
    assert "byte 0xe9 at position 13" in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/v1/audio/speech", json={"model": "tts-1", "input": "Hi.", "voice": "male_1",
                                                        "speed": True})
    assert r.status_code == 400 and "speed" in r.json()["error"]["message"], r.text  # /tts refuses it too
    assert httpx.head(f"{server.url}/health").status_code == 200  # health probes that use HEAD


def test_health_voices_and_openapi(server):
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["loaded"] is False
    assert health["queue"]["concurrency"] == 2 and health["queue"]["max_waiting"] == 8
    assert health["thermal"]["state"] == "unknown"
    voices = httpx.get(f"{server.url}/voices").json()
    assert voices["presets"] == ["female_1", "female_2", "male_1", "male_2", "child"]
    httpx.post(f"{server.url}/tts", json={"text": "hi."}, timeout=30).raise_for_status()
    assert httpx.get(f"{server.url}/health").json()["loaded"] is True
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/tts", "/v1/audio/speech", "/health", "/voices", "/jobs/{job_id}"} <= set(schema["paths"])
    assert httpx.get(f"{server.url}/docs").status_code == 404  # Swagger needs a CDN: off


@pytest.mark.parametrize("payload, status, kind", [
    ({}, 400, "invalid_request"),  # missing text
    ({"text": ""}, 400, "invalid_text"),
    ({"text": "x" * 5001}, 400, "invalid_text"),
    ({"text": 123}, 400, "invalid_request"),  # wrong JSON type
    ({"text": "hi", "speed": "fast"}, 400, "invalid_request"),
    ({"text": ["a"], "speaker": 5}, 400, "invalid_request"),
    ({"text": "hi", "consent": True, "prompt_audio": "not base64!!"}, 400, "invalid_audio"),
    ({"text": "hi", "consent": True,
      "prompt_audio": base64.b64encode(b"%PDF-1.4 not audio").decode()}, 400, "invalid_audio"),
    ({"text": "hi", "speaker": "robot"}, 404, "not_found"),
    ({"text": "hi", "voice_id": "nobody"}, 404, "not_found"),
    ({"text": "hi", "speed": 9.0}, 400, "invalid_parameter"),
    ({"text": "hi", "speed": 0.1}, 400, "invalid_parameter"),
    ({"text": "hi", "language": "xx"}, 400, "invalid_request"),
    ({"text": "hi", "language": "fr"}, 400, "invalid_parameter"),  # known; the fake engine lacks it
    ({"text": "hi", "colour": "blue"}, 400, "invalid_request"),
])
def test_bad_input_is_4xx_with_a_message(server, payload, status, kind):
    r = httpx.post(f"{server.url}/tts", json=payload, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == kind and error["message"]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"  # still alive


@pytest.mark.parametrize("consent", [None, False, "yes", 1])
def test_prompt_audio_without_consent_is_refused_with_its_code(server, consent):
    """No consent: 400 consent_required, before the audio is read; strict JSON: "yes" is no bool."""
    payload = {"text": "hi", "prompt_audio": wav_b64(4.0)}
    if consent is not None:
        payload["consent"] = consent
    r = httpx.post(f"{server.url}/tts", json=payload, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    if consent in (None, False):
        assert error["code"] == "consent_required" and "consent: true" in error["message"], error
    else:
        assert error["type"] == "invalid_request" and "consent" in error["message"], error
    assert httpx.get(f"{server.url}/jobs").json()["jobs"] == []


def test_malformed_json_and_oversized_body(make_service, web_settings, live_server):
    service = make_service(dataclasses.replace(web_settings, max_upload_mb=0.05))
    server = live_server(service)
    r = httpx.post(f"{server.url}/tts", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request"
    r = httpx.post(f"{server.url}/tts", json={"text": "hi", "consent": True,
                                              "prompt_audio": wav_b64(5.0)})
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
    r = httpx.get(f"{server.url}/no/such/route")
    assert r.status_code == 404 and "error" in r.json()


def test_auth_applies_to_rest_when_set(make_service, web_settings, live_server):
    service = make_service(dataclasses.replace(web_settings, auth="teacher:s3cret"))
    server = live_server(service)
    assert httpx.get(f"{server.url}/health").status_code == 401
    assert httpx.get(f"{server.url}/health", auth=("teacher", "wrong")).status_code == 401
    assert httpx.get(f"{server.url}/health", auth=("teacher", "s3cret")).status_code == 200
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="s3cret", max_retries=0)
    audio = client.audio.speech.create(model="tts-1", voice="female_1", input="Hi.",
                                       response_format="wav")
    assert audio.content[:4] == b"RIFF"


def test_odd_credentials_are_a_401_and_a_non_ascii_password_works(make_service, web_settings,
                                                                     live_server):
    """Raw (not base64) bytes after "Basic" were a bare 500; a UTF-8 bearer password never matched."""
    service = make_service(dataclasses.replace(web_settings, auth="teacher:密码"))
    server = live_server(service)
    for header in ("Basic \u00e9t\u00e9".encode("latin-1"), "Basic 密码".encode(), b"Basic",
                   b"Bearer wrong", "Bearer 密".encode()):
        r = httpx.get(f"{server.url}/health", headers={"authorization": header})
        assert r.status_code == 401, (header, r.status_code, r.text)
        assert r.json()["error"]["type"] == "unauthorized"
    assert httpx.get(f"{server.url}/health", auth=("teacher", "密码")).status_code == 200
    r = httpx.get(f"{server.url}/health", headers={"authorization": "Bearer 密码".encode()})
    assert r.status_code == 200, r.text  # what curl -H 'Authorization: Bearer 密码' sends (UTF-8)


@pytest.mark.parametrize("content, content_type, expected", [
    (b'{"text": "hi"}', "application/x-www-form-urlencoded", "Content-Type: application/json"),
    (b'{"text": "hi"}', "text/plain", "Content-Type: application/json"),
    (b'{"text": "hi",,}', "application/json", "invalid JSON at character 14"),
    (b'["hi"]', "application/json", "not an object"),
    (b"", "application/json", "no body"),
])
def test_a_body_that_is_not_a_json_object_is_named(server, content, content_type, expected):
    r = httpx.post(f"{server.url}/tts", content=content, headers={"content-type": content_type})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert expected in message, message
    assert "valid dictionary" not in message and "JSON decode error" not in message, message


def test_wrong_method_and_unknown_route_keep_the_error_shape_next_to_the_page(make_service,
                                                                               live_server):
    server = live_server(make_service(), with_ui=True)  # the page is mounted at "/"
    for method, path, allow in [("GET", "/tts", "POST"), ("PUT", "/tts", "POST"),
                                ("GET", "/v1/audio/speech", "POST"), ("POST", "/health", "GET, HEAD"),
                                ("POST", "/jobs/some-id", "GET, DELETE")]:
        r = httpx.request(method, f"{server.url}{path}")
        assert r.status_code == 405, (method, path, r.status_code, r.text)
        assert r.headers["allow"] == allow
        assert r.json()["error"]["type"] == "method_not_allowed", r.text
    for path in ("/v1/no-such-list", "/no/such/route"):
        r = httpx.get(f"{server.url}{path}")
        assert r.status_code == 404, r.text
        assert r.json()["error"]["type"] == "not_found" and path in r.json()["error"]["message"]
    # the page and Gradio's own routes are untouched
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    info = httpx.get(f"{server.url}/gradio_api/info")
    assert info.status_code == 200 and "/clone" in info.json()["named_endpoints"]
    assert httpx.get(f"{server.url}/config").json()["api_prefix"] == "/gradio_api"
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_text_not_read_aloud_is_reported_in_skipped(server):
    r = httpx.post(f"{server.url}/tts", json={"text": "[fr]Bonjour. [ko]안녕하세요 class. Привет!"},
                   timeout=30)
    assert r.status_code == 200, r.text
    skipped = r.json()["skipped"]
    assert any("[fr]" in s for s in skipped) and any("[ko]" in s for s in skipped), skipped
    assert any("Hangul" in s and "안녕하세요" in s for s in skipped), skipped
    assert any("Cyrillic" in s and "Привет" in s for s in skipped), skipped
    r = httpx.post(f"{server.url}/tts", json={"text": "[zh]你好[en]Hello [it] works."}, timeout=30)
    assert r.status_code == 200 and r.json()["skipped"] == []
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    speech = client.audio.speech.with_raw_response.create(model="tts-1", voice="male_1",
                                                          input="Hello. Привет.", response_format="wav")
    report = json.loads(speech.headers["x-cosyedge-report"])
    assert any("Cyrillic" in s for s in report["skipped"]), report


def test_ignored_fields_are_named_in_notes(server):
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello.", "prompt_text": "hello there"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["notes"] == [("prompt_text ignored: it is the transcript of prompt_audio, and no "
                                  "prompt_audio was sent")]
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello.", "speaker": "male_1",
                                              "consent": True, "prompt_audio": wav_b64(4.0), "prompt_text": "hi"},
                   timeout=30)
    assert r.status_code == 200, r.text
    notes = r.json()["notes"]
    assert any(n.startswith("speaker 'male_1' ignored") for n in notes), notes
    assert any(n.startswith("prompt_text ignored") and "cannot clone" in n for n in notes), notes
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello.", "speaker": "male_1"}, timeout=30)
    assert r.json()["notes"] == [] and r.json()["voice"] == "male_1"


def test_a_full_queue_while_hot_is_a_429_that_names_the_heat(make_service, web_settings, live_server):
    """REST: the hot box's refusal has its own code and a Retry-After from the cooling (84 °C, hot
    ends at 75 °C, 0.1 °C/s assumed before any cooling is measured: 90 s)."""
    from cosyedge.host.thermal import ThermalGovernor, ThermalThresholds
    from cosyedge.service.facade import TTSRequest

    governor = ThermalGovernor(lambda: 84.0, ThermalThresholds(70, 80, 90, 5), 2, 2, min_interval_s=0)
    service = make_service(dataclasses.replace(web_settings, queue_size=1), thermal=governor)
    server = live_server(service)
    held = service.submit(TTSRequest(text="Held."))  # waits: nothing starts while hot
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello."})
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "cooling_down" and "84 °C" in error["message"], error
    assert r.headers["Retry-After"] == "90"
    assert not held.finished
    service.cancel(held.id)
