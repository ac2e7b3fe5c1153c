"""The OpenAI-style listing and voice routes (cosyedge/web/openai_routes.py): with the official
``openai`` client where it has a call for the route, plain HTTP where it has none (voice list)."""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf


def wav_bytes(seconds: float = 4.0) -> bytes:
    buf = io.BytesIO()
    t = np.arange(int(seconds * 16000)) / 16000
    sf.write(buf, 0.2 * np.sin(2 * np.pi * 200 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)), 16000,
             format="WAV")
    return buf.getvalue()


@pytest.fixture
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def report(response) -> dict:
    return json.loads(response.response.headers["x-cosyedge-report"])


def test_models_list_the_loaded_model_and_its_aliases(server, client):
    assert [m.id for m in client.models.list()] == ["kokoro-int8", "tts-1", "tts-1-hd"]
    audio_models = httpx.get(f"{server.url}/v1/audio/models").json()  # what Open WebUI reads
    assert [m["id"] for m in audio_models["models"]] == ["kokoro-int8", "tts-1", "tts-1-hd"]


def test_a_model_that_is_not_loaded_is_a_400_naming_the_loaded_one(server, client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="gpt-4o-mini-tts", voice="male_1", input="Hello.")
    error = info.value.body
    assert error["code"] == "model_not_loaded" and "'kokoro-int8'" in error["message"], error
    assert set(error) == {"type", "code", "message", "param"}  # OpenAI's error shape
    for model in ("tts-1-hd", "kokoro-int8"):
        assert client.audio.speech.create(model=model, voice="male_1", input="Hi.").content


def test_create_list_speak_and_delete_a_voice_with_the_official_client(server, client):
    voice = client.audio.voices.create(name="Ms Lee", audio_sample=("lee.wav", wav_bytes(), "audio/wav"),
                                       consent="cons_123")
    assert (voice.id, voice.name, voice.object, voice.type) == ("ms-lee", "Ms Lee", "audio.voice",
                                                                "audio_sample")
    assert server.service.library.get("ms-lee").consent.reference == "cons_123"
    listed = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert {"id": "ms-lee", "name": "Ms Lee (saved)"}.items() <= listed[-1].items()
    assert [v["id"] for v in listed[:5]] == ["female_1", "female_2", "male_1", "male_2", "child"]
    for named in ("ms-lee", {"id": "ms-lee"}):  # a saved id, and the client's custom-voice object
        speech = client.audio.speech.create(model="tts-1", voice=named, input="Hello.",
                                            response_format="wav")
        assert report(speech)["voice"] == "saved voice Ms Lee", named
    deleted = client.audio.voices.delete("ms-lee")
    assert (deleted.id, deleted.deleted, deleted.object) == ("ms-lee", True, "audio.voice.deleted")
    assert server.service.library.list() == []


def test_precedence_preset_then_saved_id_then_openai_name(server, client):
    r = httpx.post(f"{server.url}/v1/audio/voices", data={"name": "alloy", "consent": "true"},
                   files={"audio_sample": ("a.wav", wav_bytes(), "audio/wav")})
    assert r.status_code == 200, r.text
    assert server.service.library.get("alloy").consent.reference is None  # "true": a plain yes
    assert report(client.audio.speech.create(model="tts-1", voice="alloy", input="Hi."))["voice"] == (
        "saved voice alloy")  # a saved id before OpenAI's name
    assert report(client.audio.speech.create(model="tts-1", voice="nova", input="Hi."))["voice"] == "female_2"
    for name in ("female_1", "Female_1", "female 1"):  # a preset comes first, so never a saved name
        r = httpx.post(f"{server.url}/v1/audio/voices", data={"name": name, "consent": "true"},
                       files={"audio_sample": ("a.wav", wav_bytes(), "audio/wav")})
        assert r.status_code == 400 and r.json()["error"]["code"] == "voice_name_preset", (name, r.text)


@pytest.mark.parametrize("form, upload, status, code", [
    ({"name": "Ms Lee"}, wav_bytes(), 400, "consent_required"),
    ({"name": "Ms Lee", "consent": "false"}, wav_bytes(), 400, "consent_required"),
    ({"name": "Ms Lee", "consent": "true"}, b"%PDF-1.4 not audio", 400, "audio_not_recognised"),
    ({"name": "../../etc/passwd", "consent": "true"}, wav_bytes(), 400, "voice_name_slash"),
    ({"name": "..", "consent": "true"}, wav_bytes(), 400, "voice_name_not_allowed"),
    ({"name": "Ms Lee", "consent": "true", "type": "prompt"}, wav_bytes(), 400, "voice_type_unsupported"),
])
def test_bad_voice_uploads_are_refused_in_the_error_shape(server, form, upload, status, code):
    r = httpx.post(f"{server.url}/v1/audio/voices", data=form,
                   files={"audio_sample": ("x.wav", upload, "audio/wav")})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"] and "param" in error, error
    assert server.service.library.list() == []


def test_deleting_an_unknown_or_traversal_id_is_refused(server, client):
    import openai

    with pytest.raises(openai.NotFoundError) as info:
        client.audio.voices.delete("nobody")
    assert info.value.body["code"] == "saved_voice_unknown"
    with pytest.raises(openai.NotFoundError):
        client.audio.voices.delete("female_1")  # a preset is no saved voice
    for bad in ("..%2F..%2Fetc", "%2E%2E"):
        r = httpx.delete(f"{server.url}/v1/audio/voices/{bad}")
        assert r.status_code in (400, 404) and "error" in r.json(), r.text
    r = httpx.post(f"{server.url}/v1/audio/speech", json={"model": "tts-1", "input": "Hi.",
                                                           "voice": {"id": "nobody"}})
    assert r.status_code == 404 and r.json()["error"]["code"] == "preset_unknown", r.text


def test_the_voice_routes_follow_the_apps_auth(make_service, web_settings, live_server):
    """With COSYEDGE_AUTH on, listing, saving and deleting voices need the password (Bearer, what
    the openai client sends as its api_key)."""
    import dataclasses

    from openai import AuthenticationError, OpenAI

    service = make_service(dataclasses.replace(web_settings, host="0.0.0.0", auth="teacher:s3cret"))
    server = live_server(service)
    for method, path in (("GET", "/v1/models"), ("GET", "/v1/audio/voices"), ("GET", "/v1/audio/models"),
                         ("POST", "/v1/audio/voices"), ("DELETE", "/v1/audio/voices/x")):
        assert httpx.request(method, server.url + path).status_code == 401, (method, path)
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
    client = OpenAI(base_url=f"{server.url}/v1", api_key="s3cret", max_retries=0)
    voice = client.audio.voices.create(name="Ms Lee", audio_sample=("lee.wav", wav_bytes(), "audio/wav"),
                                       consent="true")
    assert client.audio.voices.delete(voice.id).deleted
