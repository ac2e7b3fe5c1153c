"""``quality`` over REST: ``POST /tts`` and ``/v1/audio/speech``, per request and as the server default.

On the tiny CosyVoice model (the real service and engine, random weights): the mode reaches the
flow, every answer in a mode other than exact names its levers in a coded note, an unknown mode is a
400 naming the modes, and the server default (``Settings.quality``, COSYEDGE_QUALITY) applies to
clients that send none (an OpenAI client cannot). On the fake engine (no modes, as Kokoro): the field
is accepted and ignored with a note.
"""

from __future__ import annotations

import json

import httpx
import pytest

from cosyedge.config import Settings, SettingsError
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture
def steps_seen(monkeypatch) -> list[tuple]:
    """(n_timesteps, cfg_steps) of every flow render, whole sentences and streams."""
    from cosyedge.engines.cosyvoice.common.flow import FlowDecoder

    seen: list[tuple] = []
    whole, stream = FlowDecoder.__call__, FlowDecoder.stream

    def spy_whole(self, tokens, prompt_tokens, prompt_mel, embedding, n_timesteps=None, cfg_steps=None):  # noqa: ANN001
        seen.append((n_timesteps, cfg_steps))
        return whole(self, tokens, prompt_tokens, prompt_mel, embedding, n_timesteps, cfg_steps=cfg_steps)

    def spy_stream(self, *args, cfg_steps=None, left_chunks=0):  # noqa: ANN001, ANN002
        seen.append((args[3], cfg_steps, left_chunks))
        return stream(self, *args, cfg_steps=cfg_steps, left_chunks=left_chunks)

    monkeypatch.setattr(FlowDecoder, "__call__", spy_whole)
    monkeypatch.setattr(FlowDecoder, "stream", spy_stream)
    return seen


@pytest.fixture
def cosyvoice_server(tiny_cosyvoice_models, tmp_path, live_server):
    """A live server on the tiny CosyVoice2 model whose default quality is ``live``."""
    from cosyedge.service.facade import Service

    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model=MODEL_ID, onnx_threads=1,
                        idle_unload_minutes=0, thread_calibration=False, quality="live").validate()
    service = Service(settings)
    service.start()
    yield live_server(service)
    service.close()


def _quality_notes(notes: list[str]) -> list[str]:
    """The ``quality_levers`` notes (a REST body carries notes as text; the speed-mode check adds a
    ``quality X: checked / not checked`` note of its own)."""
    return [note for note in notes if note.startswith("quality ") and " flow steps" in note]


@pytest.mark.slow  # loads the tiny model
def test_each_request_names_its_mode_and_the_answer_its_levers(cosyvoice_server, steps_seen):
    r = httpx.post(f"{cosyvoice_server.url}/tts",
                   json={"text": TEXT, "speaker": PRESET_NAMES[0], "quality": "balanced"}, timeout=60)
    assert r.status_code == 200, r.text
    assert steps_seen == [(6, 2)]
    (note,) = _quality_notes(r.json()["notes"])
    assert note.startswith("quality balanced: 6 flow steps, CFG on the first 2 of them, 6 chunks of left context")
    assert "flow steps: 6 (fast" in " ".join(r.json()["notes"])

    steps_seen.clear()
    r = httpx.post(f"{cosyvoice_server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0],
                                                        "quality": "exact"}, timeout=60)
    assert r.status_code == 200 and steps_seen == [(None, None)]  # upstream's call, as before
    assert _quality_notes(r.json()["notes"]) == [] and "flow steps: 10 (standard, as upstream)" in r.json()["notes"]

    steps_seen.clear()  # flow_steps wins over the mode's steps; the mode's CFG schedule stays
    r = httpx.post(f"{cosyvoice_server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0],
                                                        "quality": "balanced", "flow_steps": 8}, timeout=60)
    assert r.status_code == 200 and steps_seen == [(8, 2)]
    assert _quality_notes(r.json()["notes"])[0].startswith("quality balanced: 8 flow steps")


@pytest.mark.slow
def test_the_server_default_applies_to_clients_that_send_none(cosyvoice_server, steps_seen):
    body = {"model": "tts-1", "input": TEXT, "voice": PRESET_NAMES[0], "response_format": "pcm",
            "stream_format": "audio"}
    with httpx.stream("POST", f"{cosyvoice_server.url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        report = json.loads(r.headers["x-cosyedge-report"])
        r.read()
    assert steps_seen == [(4, 0, 4)]  # live: 4 steps, no CFG, 4 chunks of left context
    (note,) = _quality_notes(report["notes"])
    assert note.startswith("quality live: 4 flow steps, no CFG, 4 chunks of left context, first hop 10 tokens")


@pytest.mark.slow
@pytest.mark.parametrize("route,body", [
    ("/tts", {"text": TEXT, "speaker": PRESET_NAMES[0], "quality": "fastest"}),
    ("/v1/audio/speech", {"model": "tts-1", "input": TEXT, "voice": PRESET_NAMES[0], "quality": "Live"}),
    ("/tts", {"text": TEXT, "speaker": PRESET_NAMES[0], "quality": 3})])
def test_an_unknown_mode_is_refused_naming_the_modes(cosyvoice_server, steps_seen, route, body):
    r = httpx.post(f"{cosyvoice_server.url}{route}", json=body, timeout=60)
    assert r.status_code == 400, r.text
    if isinstance(body["quality"], str):
        assert r.json()["error"]["code"] == "quality_unknown"
        assert "exact, balanced, live" in r.json()["error"]["message"]
    assert steps_seen == []


def test_an_engine_without_modes_ignores_quality_with_a_note(server):
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello.", "quality": "live"}, timeout=30)
    assert r.status_code == 200, r.text
    assert "quality ignored: the fake engine has no quality modes" in " ".join(r.json()["notes"])
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello."}, timeout=30)  # the default says nothing
    assert not [note for note in r.json()["notes"] if "quality" in note]
    r = httpx.post(f"{server.url}/tts", json={"text": "Hello.", "quality": "fastest"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "quality_unknown"


def test_an_unknown_server_default_stops_the_service_naming_the_modes(make_service, web_settings):
    import dataclasses

    with pytest.raises(SettingsError, match="COSYEDGE_QUALITY.*|.*exact, balanced, live"):
        make_service(dataclasses.replace(web_settings, quality="fast"))
