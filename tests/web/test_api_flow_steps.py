"""``flow_steps`` over REST: ``POST /tts`` and ``/v1/audio/speech`` on the tiny CosyVoice model.

An in-process server (the real service and engine, random tiny weights). The steps asked for must
reach the flow decoder, the answer must state them, and a count outside 1-10 is refused with the
service's own code, as in the UI and the CLI.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.tiny_models import PRESET_NAMES

pytestmark = pytest.mark.slow  # loads the tiny model

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture
def server(tiny_cosyvoice_server):
    return tiny_cosyvoice_server


@pytest.fixture
def steps_seen(monkeypatch) -> list[int | None]:
    """Every ``n_timesteps`` the flow decoder is called with (whole sentences and streams)."""
    from cosyedge.engines.cosyvoice.common.flow import FlowDecoder

    seen: list[int | None] = []
    whole, stream = FlowDecoder.__call__, FlowDecoder.stream

    def spy_whole(self, tokens, prompt_tokens, prompt_mel, embedding, n_timesteps=None, **levers):  # noqa: ANN001
        seen.append(n_timesteps)
        return whole(self, tokens, prompt_tokens, prompt_mel, embedding, n_timesteps, **levers)

    def spy_stream(self, prompt_tokens, prompt_mel, embedding, n_timesteps=None, **levers):  # noqa: ANN001
        seen.append(n_timesteps)
        return stream(self, prompt_tokens, prompt_mel, embedding, n_timesteps, **levers)

    monkeypatch.setattr(FlowDecoder, "__call__", spy_whole)
    monkeypatch.setattr(FlowDecoder, "stream", spy_stream)
    return seen


def test_tts_uses_and_states_the_flow_steps(server, steps_seen):
    r = httpx.post(f"{server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0], "flow_steps": 4},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert steps_seen and set(steps_seen) == {4}
    assert any(note.startswith("flow steps: 4 (fast") for note in r.json()["notes"]), r.json()["notes"]

    steps_seen.clear()
    r = httpx.post(f"{server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0]}, timeout=60)
    assert r.status_code == 200, r.text
    assert steps_seen and set(steps_seen) == {None}  # the model's own count, upstream's 10
    assert "flow steps: 10 (standard, as upstream)" in r.json()["notes"]


@pytest.mark.parametrize("steps", [0, 11])
def test_tts_refuses_flow_steps_out_of_range(server, steps_seen, steps):
    r = httpx.post(f"{server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0], "flow_steps": steps},
                   timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "flow_steps_out_of_range"
    assert steps_seen == []


@pytest.mark.parametrize("bad", [True, "5", 4.5])
def test_tts_refuses_flow_steps_that_are_not_whole_numbers(server, steps_seen, bad):
    r = httpx.post(f"{server.url}/tts", json={"text": TEXT, "speaker": PRESET_NAMES[0], "flow_steps": bad},
                   timeout=60)
    assert r.status_code == 400 and "flow_steps" in r.json()["error"]["message"]
    assert steps_seen == []


def test_speech_streams_with_the_flow_steps_asked_for(server, steps_seen):
    body = {"model": "tts-1", "input": TEXT, "voice": PRESET_NAMES[0], "response_format": "pcm",
            "stream_format": "audio", "flow_steps": 3}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        report = json.loads(r.headers["x-cosyedge-report"])
        r.read()
    assert steps_seen and set(steps_seen) == {3}
    assert any(note.startswith("flow steps: 3 (fast") for note in report["notes"]), report
    r = httpx.post(f"{server.url}/v1/audio/speech", json={**body, "flow_steps": 12, "stream_format": None},
                   timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "flow_steps_out_of_range"
