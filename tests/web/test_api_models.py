"""REST: GET /models and POST /models/switch (409 with its code while jobs run; behind the
credentials when COSYEDGE_AUTH is set)."""

from __future__ import annotations

import base64
import dataclasses
import threading

import pytest
from fastapi.testclient import TestClient

from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.model_folders import COSYVOICE_LICENCE, make_model
from tests.helpers.waiting import wait_until


class GatedEngine(FakeEngine):
    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def synthesize(self, *args, **kwargs):
        assert self.gate.wait(10)
        yield from super().synthesize(*args, **kwargs)


@pytest.fixture
def models_settings(web_settings):
    make_model(web_settings.models_path, "kokoro-int8")
    make_model(web_settings.models_path, "cosyvoice2-int8", engine="cosyvoice2", licence=COSYVOICE_LICENCE)
    return web_settings


def client_for(service):
    from app import build_app

    return TestClient(build_app(service, with_ui=False))


def test_models_lists_engine_capabilities_size_and_licence(make_service, models_settings):
    body = client_for(make_service(models_settings)).get("/models").json()
    assert body["current"] == "kokoro-int8"
    cosy = next(model for model in body["models"] if model["id"] == "cosyvoice2-int8")
    assert cosy["engine"] == "cosyvoice2" and cosy["capabilities"]["native_clone"] is True
    assert cosy["size_bytes"] > 0 and cosy["size"].endswith("kB")
    assert cosy["licence"].startswith("weights: Apache-2.0")


def test_switch_answers_409_with_its_code_while_a_job_runs(make_service, models_settings):
    gate = threading.Event()
    service = make_service(models_settings, factory=lambda: GatedEngine(gate))
    client = client_for(service)
    job = service.submit(TTSRequest(text="Busy."))
    wait_until(lambda: service.queue.stats().running == 1, what="the job running")
    response = client.post("/models/switch", json={"model": "cosyvoice2-int8"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("conflict", "model_switch_busy")
    assert "1 job(s) running" in error["message"]
    gate.set()
    assert job.wait(10) and job.outcome().audio.size  # the job was not dropped
    ok = client.post("/models/switch", json={"model": "cosyvoice2-int8"})
    assert ok.status_code == 200 and ok.json()["current"] == "cosyvoice2-int8"
    assert client.get("/models").json()["current"] == "cosyvoice2-int8"


def test_switch_to_an_unknown_model_is_404_and_a_bad_body_400(make_service, models_settings):
    client = client_for(make_service(models_settings))
    unknown = client.post("/models/switch", json={"model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_unknown"
    assert client.post("/models/switch", json={"model": 3}).status_code == 400
    assert client.post("/models/switch", json={}).status_code == 400


def test_with_auth_only_the_authenticated_user_can_switch(make_service, models_settings):
    settings = dataclasses.replace(models_settings, auth="teacher:secret")
    service = make_service(settings)
    client = client_for(service)
    refused = client.post("/models/switch", json={"model": "cosyvoice2-int8"})
    assert refused.status_code == 401 and service.settings.model == "kokoro-int8"
    wrong = client.post("/models/switch", json={"model": "cosyvoice2-int8"},
                        headers={"Authorization": "Basic " + base64.b64encode(b"teacher:nope").decode()})
    assert wrong.status_code == 401 and service.settings.model == "kokoro-int8"
    good = client.post("/models/switch", json={"model": "cosyvoice2-int8"},
                       headers={"Authorization": "Basic " + base64.b64encode(b"teacher:secret").decode()})
    assert good.status_code == 200 and service.settings.model == "cosyvoice2-int8"
