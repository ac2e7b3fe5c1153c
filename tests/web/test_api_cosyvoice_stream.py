"""``/v1/audio/speech`` with ``stream_format: "audio"`` on the tiny CosyVoice model: hop by hop.

An in-process server (the real service and engine, random tiny weights); :class:`HopGate` holds each
request's second hop until the client has read audio, which only a hop-by-hop path can give.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from tests.helpers.hop_gate import HopGate
from tests.helpers.tiny_models import PRESET_NAMES

pytestmark = pytest.mark.slow  # loads the tiny model

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")


@pytest.fixture
def server(tiny_cosyvoice_server):
    return tiny_cosyvoice_server


def test_speech_stream_sends_the_first_hop_before_the_second_is_made(server, monkeypatch):
    gate = HopGate().install(monkeypatch)
    body = {"model": "tts-1", "input": TEXT, "voice": PRESET_NAMES[0], "response_format": "pcm",
            "stream_format": "audio"}
    received = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["x-cosyedge-streamed"] == "true"
        for data in r.iter_bytes():
            received.append(data)
            gate.release()
    assert gate.released_in_time is True, "the client got no audio before hop 2 was made"
    assert gate.hops >= 3
    audio = np.frombuffer(b"".join(received), "<i2")
    assert audio.size > 2 * 24000 * 0.5 // 2 and np.abs(audio).max() > 0


def test_a_client_that_disconnects_mid_sentence_ends_its_job(server, monkeypatch):
    gate = HopGate(timeout_s=5).install(monkeypatch)
    body = {"model": "tts-1", "input": TEXT, "voice": PRESET_NAMES[0], "response_format": "wav",
            "stream_format": "audio"}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as r:
        job_id = r.headers["x-cosyedge-job-id"]
        next(r.iter_bytes())
    # closed with hop 2 held: the job must end cancelled, not run the sentence to its end
    for _ in range(100):
        state = httpx.get(f"{server.url}/jobs/{job_id}", timeout=10)
        if state.status_code == 404 or state.json()["state"] in ("cancelled", "failed", "done"):
            break
        time.sleep(0.1)
    assert state.status_code == 404 or state.json()["state"] == "cancelled"
    assert gate.hops <= 3  # at most the hop in the making when the client left
