"""The speed-mode check end to end on the tiny converted CosyVoice models (random weights: the figures
mean nothing, the flow is real): REST starts it, it renders with the real engine, hears with the
offline recognizer and judges with the model's campplus, writes modes.json atomically, REST and the
page show it, a cancelled check leaves the previous record whole; v1 (no speed modes) and v3 (no
presets: a saved voice is asked for) are refused by code. Nothing leaves the box: every socket
connection but to the loopback test server is refused and counted."""

from __future__ import annotations

import socket

import httpx
import pytest

from cosyedge.catalog.mode_verdicts import RESULT_NAME
from cosyedge.config import Settings
from cosyedge.service.facade import Service
from tests.helpers import cosyvoice3_fixture
from tests.helpers.cosyvoice_app import prompt_wav
from tests.helpers.tiny_models import MODEL_ID as V2_MODEL
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow  # three tiny models rendered, heard by Whisper, judged

V3_MODEL = cosyvoice3_fixture.MODEL_IDS["int8"]
V1_MODEL = "cosyvoice1-sft-tiny"


@pytest.fixture
def no_network(monkeypatch):
    """Refuse every socket connection that is not to this machine's loopback; the refusals are listed."""
    refused: list[object] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def local(address) -> bool:
        return isinstance(address, (str, bytes)) or str(address[0]) in ("127.0.0.1", "::1", "localhost")

    def guarded(self, address):
        if not local(address):
            refused.append(address)
            raise OSError(f"test refuses a connection to {address!r}: nothing may leave the box")
        return connect(self, address)

    def guarded_ex(self, address):
        if not local(address):
            refused.append(address)
            return 111
        return connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_ex)
    with socket.socket() as probe:  # the guard itself: an outside address (TEST-NET-1) is refused and listed
        with pytest.raises(OSError, match="nothing may leave the box"):
            probe.connect(("192.0.2.1", 443))
    assert refused == [("192.0.2.1", 443)]
    refused.clear()
    return refused


def linked_models(sources: dict[str, object], into) -> object:
    """``into/<id>`` for each model: its files linked from the shared (read-only) build, so the
    check's modes.json lands in the test's own folder."""
    for model_id, models_dir in sources.items():
        folder = into / model_id
        folder.mkdir(parents=True)
        for entry in (models_dir / model_id).iterdir():
            if entry.name != RESULT_NAME:
                (folder / entry.name).symlink_to(entry)
    return into


@pytest.fixture
def tiny_service(tiny_cosyvoice_models, tiny_cosyvoice3_models, tmp_path, live_server, no_network):
    models = linked_models({V2_MODEL: tiny_cosyvoice_models, V1_MODEL: tiny_cosyvoice_models,
                            V3_MODEL: tiny_cosyvoice3_models}, tmp_path / "models")
    settings = Settings(root=tmp_path, models_dir=models, model=V2_MODEL, onnx_threads=2, idle_unload_minutes=0,
                        thread_calibration=False, auto_mode_check=False).validate()
    service = Service(settings)
    service.start()
    service.mode_checks.per_language = 1  # one line per language: the flow is the same
    server = live_server(service)
    yield service, server.url, models
    service.close()
    assert not no_network, f"something tried to leave the box: {no_network}"


def run_check(url: str, model: str, **body) -> dict:
    started = httpx.post(f"{url}/models/{model}/check", json=body or None, timeout=30)
    assert started.status_code == 202, started.text
    answer: dict = {}

    def ended() -> bool:
        answer.update(httpx.get(f"{url}/models/{model}/check", timeout=30).json())
        return answer["status"]["state"] != "running"

    wait_until(ended, 600, f"the check of {model}")
    return answer


def test_a_check_on_the_tiny_v2_model_is_stored_shown_and_survives_a_cancel(tiny_service):
    service, url, models = tiny_service
    assert httpx.get(f"{url}/models/{V2_MODEL}/check", timeout=30).json()["result"] is None
    answer = run_check(url, V2_MODEL)
    assert answer["status"]["state"] == "done", answer["status"]
    result = answer["result"]
    assert answer["current"] and result["judge"] == "campplus" and result["voice"]["kind"] == "preset"
    assert set(result["modes"]) == {"balanced", "live"} and result["languages"] == ["en", "ja", "zh"]
    for entry in result["modes"].values():
        assert entry["figures"]["intelligibility_exact"] is not None and "recommended" in entry["verdict"]
    path = models / V2_MODEL / RESULT_NAME
    written = path.read_bytes()
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".tmp-")]
    listed = {m["id"]: m for m in httpx.get(f"{url}/models", timeout=30).json()["models"]}
    assert set(listed[V2_MODEL]["speed_modes"]["modes"]) == {"balanced", "live"}
    from cosyedge.web import models_tab, ui

    page = models_tab.check_view(service)
    assert result["voice"]["name"] in page and "balanced" in page and "live" in page
    labels = dict((mode, label) for label, mode in ui.quality_choices(service))
    assert "on this model" in labels["live"] and "on this model" not in labels["exact"]
    # A second check, cancelled once it renders: the first one's record stays as it was.
    started = httpx.post(f"{url}/models/{V2_MODEL}/check", timeout=30)
    assert started.status_code == 202
    wait_until(lambda: service.mode_checks.status(V2_MODEL).progress.done >= 1, 300, "the second check rendering")
    assert httpx.delete(f"{url}/models/{V2_MODEL}/check", timeout=30).json() == {"cancelled": True}
    assert service.mode_checks.wait(120)
    again = httpx.get(f"{url}/models/{V2_MODEL}/check", timeout=30).json()
    assert again["status"]["state"] == "cancelled" and again["result"] == result
    assert path.read_bytes() == written


def test_v1_has_no_modes_and_v3_asks_for_a_voice_then_checks_with_it(tiny_service):
    service, url, models = tiny_service
    service.switch_model(V1_MODEL)
    refused = httpx.post(f"{url}/models/{V1_MODEL}/check", timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "mode_check_no_modes"
    service.switch_model(V3_MODEL)
    refused = httpx.post(f"{url}/models/{V3_MODEL}/check", timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "mode_check_needs_voice"
    voice = service.save_voice("Teacher", prompt_wav(), "Hello world, this is a tiny test.", consent=True)
    service.mode_checks.languages = ("en", "de")  # one scored by pronunciation, one by the recognizer's words
    answer = run_check(url, V3_MODEL, voice=voice.id)
    assert answer["status"]["state"] == "done", answer["status"]["error"]
    result = answer["result"]
    assert result["voice"] == {"kind": "saved", "id": voice.id, "name": "Teacher"}
    assert result["languages"] == ["de", "en"]
    assert any(entry["figures"]["languages"]["de"]["method"] == "words" for entry in result["modes"].values())
    wrong = httpx.post(f"{url}/models/{V2_MODEL}/check", timeout=30)
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "mode_check_not_served"
