"""The library's REST routes (cosyedge/web/voice_api.py) and the ids behind every way a voice is
asked for: a rename keeps the id, so /tts, /v1/audio/speech and Wyoming references keep resolving;
an import keeps the id it had, and one already here is a 409 with its code unless asked to rename;
the library's bound refuses with 507 and its code, and says how much room is left."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import soundfile as sf

from cosyedge.web.wyoming_server import describe_info, voice_fields


def wav(seconds: float = 4.0, seed: int = 0) -> bytes:
    from tests.test_audio_prompt import speechlike

    buf = io.BytesIO()
    sf.write(buf, speechlike(seconds, seed=seed), 16000, format="WAV")
    return buf.getvalue()


@pytest.fixture
def api(make_service):
    from fastapi.testclient import TestClient

    from cosyedge.web.api import create_api

    def make(service=None):
        service = service or make_service()
        return TestClient(create_api(service)), service

    return make


def save(client, name: str, seed: int = 0):
    return client.post("/v1/audio/voices", data={"name": name, "consent": "true", "transcript": "hello"},
                       files={"audio_sample": ("me.wav", wav(seed=seed), "audio/wav")})


def test_a_rename_keeps_the_id_every_reference_uses(api):
    client, service = api()
    assert save(client, "王老师").json()["id"] == "wang-lao-shi"
    renamed = client.post("/voices/wang-lao-shi/rename", json={"name": "Ms Wang 王老师"})
    assert renamed.status_code == 200 and renamed.json() == {"id": "wang-lao-shi", "name": "Ms Wang 王老师"}
    assert client.post("/tts", json={"text": "Hello.", "voice_id": "wang-lao-shi"}).status_code == 200
    speech = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello.", "voice": "wang-lao-shi",
                                                   "response_format": "wav"})
    assert speech.status_code == 200 and speech.content[:4] == b"RIFF"
    assert voice_fields(service, "wang-lao-shi") == {"speaker": None, "voice_id": "wang-lao-shi"}  # Wyoming
    assert "wang-lao-shi" in [v.name for v in describe_info(service).tts[0].voices]
    listed = client.get("/voices").json()["saved"]
    assert [(v["id"], v["name"]) for v in listed] == [("wang-lao-shi", "Ms Wang 王老师")]
    assert client.post("/voices/nobody/rename", json={"name": "X"}).status_code == 404


def test_export_and_import_keep_the_id_and_refuse_a_taken_one_with_a_code(api):
    client, service = api()
    save(client, "Ms Lee")
    client.post("/voices/ms-lee/rename", json={"name": "Teacher Lee"})
    exported = client.get("/voices/ms-lee/export")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    assert 'filename="ms-lee.voice.zip"' in exported.headers["content-disposition"]
    refused = client.post("/voices/import", content=exported.content)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "voice_exists" and "Teacher Lee" in refused.json()["error"]["message"]
    copy = client.post("/voices/import?rename=true", content=exported.content)
    assert copy.status_code == 200 and (copy.json()["id"], copy.json()["name"]) == ("teacher-lee-2", "Teacher Lee 2")
    named = client.post("/voices/import?rename=true&name=Lee%20Copy", content=exported.content)
    assert (named.json()["id"], named.json()["name"]) == ("lee-copy", "Lee Copy")
    client.delete("/v1/audio/voices/ms-lee")
    back = client.post("/voices/import", content=exported.content)
    assert back.status_code == 200 and (back.json()["id"], back.json()["name"]) == ("ms-lee", "Teacher Lee")
    assert client.post("/voices/import", content=b"not a zip").json()["error"]["code"] == "voice_file_not_zip"


def test_the_library_bound_refuses_new_saves_with_507_and_says_the_room(api, make_service, web_settings):
    client, service = api(make_service(dataclasses.replace(web_settings, voice_library_max_voices=2)))
    assert client.get("/voices/library").json() == {"voices": 0, "max_voices": 2, "mb": 0.0,
                                                    "max_mb": 256.0, "room": 2}
    assert save(client, "One").status_code == 200 and save(client, "Two", seed=1).status_code == 200
    full = save(client, "Three", seed=2)
    assert full.status_code == 507 and full.json()["error"]["code"] == "voice_library_full"
    assert "nothing saved is removed" in full.json()["error"]["message"]
    exported = client.get("/voices/one/export").content
    assert client.post("/voices/import?rename=true", content=exported).json()["error"]["code"] == \
        "voice_library_full"
    library = client.get("/voices").json()["library"]
    assert library["voices"] == 2 and library["room"] == 0
    assert client.post("/tts", json={"text": "Still usable.", "voice_id": "two"}).status_code == 200
    assert sorted(v["id"] for v in client.get("/voices").json()["saved"]) == ["one", "two"]
