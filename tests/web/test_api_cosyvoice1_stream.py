"""``/v1/audio/speech`` with ``stream_format: "audio"`` on the tiny CosyVoice-300M-SFT model: hop by hop.

An in-process server (the real service and engine, random tiny weights); :class:`HopGate` holds the
sentence's second hop until the client has read audio, which only a hop-by-hop path can give. The
page, the CLI and Wyoming read the same job stream (their hop tests run on CosyVoice2).
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.helpers.hop_gate import LONG_V1_SENTENCE as TEXT
from tests.helpers.hop_gate import HopGate

pytestmark = pytest.mark.slow  # loads the tiny model


@pytest.fixture
def server(tiny_cosyvoice_models, tmp_path, live_server):
    from cosyedge.config import Settings
    from cosyedge.service.facade import Service

    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model="cosyvoice1-sft-tiny",
                        onnx_threads=1, idle_unload_minutes=0).validate()
    service = Service(settings)
    service.start()
    yield live_server(service)
    service.close()


def test_speech_stream_sends_the_first_hop_before_the_second_is_made(server, monkeypatch):
    gate = HopGate().install(monkeypatch)
    body = {"model": "tts-1", "input": TEXT, "voice": "中文女", "response_format": "pcm", "stream_format": "audio"}
    received = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["x-cosyedge-streamed"] == "true"
        for data in r.iter_bytes():
            received.append(data)
            gate.release()
    assert gate.released_in_time is True, "the client got no audio before hop 2 was made"
    assert gate.hops >= 2
    audio = np.frombuffer(b"".join(received), "<i2")
    assert audio.size > 22050 and np.abs(audio).max() > 0
