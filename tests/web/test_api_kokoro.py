"""The real server (`python app.py`) on the real embedded Kokoro engine, in a subprocess.

Shows lazy load and idle unload end to end: the page is up with nothing loaded, the first job loads
the model, and after the (shortened) idle timeout it is released and the process RSS falls.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time

import httpx
import pytest
import soundfile as sf

from tests.helpers.live_server import free_port, stop_process
from tests.helpers import REPO

pytestmark = pytest.mark.slow

ROOT = REPO
IDLE_MINUTES = 0.1  # 6 s


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def wait_health(url: str, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        try:
            last = httpx.get(f"{url}/health", timeout=5).json()
            if predicate(last):
                return last
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"health never reached the expected state; last: {last}")


@pytest.fixture(scope="module")
def app_server(tmp_path_factory, kokoro_models_dir):
    port = free_port()
    outputs = tmp_path_factory.mktemp("outputs")
    env = {**os.environ, "COSYEDGE_IDLE_UNLOAD_MINUTES": str(IDLE_MINUTES),
           "COSYEDGE_OUTPUTS_DIR": str(outputs), "COSYEDGE_LOG_LEVEL": "WARNING",
           "COSYEDGE_MODELS_DIR": str(kokoro_models_dir)}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        health = wait_health(url, lambda h: h.get("status") == "ok", timeout=120)
        proc.startup_s = time.monotonic() - started  # type: ignore[attr-defined]
        proc.first_health = health  # type: ignore[attr-defined]
        proc.url = url  # type: ignore[attr-defined]
        yield proc
    finally:
        stop_process(proc)


def test_lazy_load_real_tts_openai_and_idle_unload(app_server, record_property):
    url = app_server.url
    assert app_server.first_health["loaded"] is False, "the model loaded at start"
    assert app_server.first_health["engine"] == "kokoro"
    page = httpx.get(url + "/", timeout=30)
    assert page.status_code == 200 and "gradio" in page.text.lower()
    rss_start = rss_mb(app_server.pid)

    r = httpx.post(f"{url}/tts", json={"text": "[zh]今天天气真好[en]It's sunny today",
                                       "speaker": "female_1", "speed": 1.0}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == body["sample_rate"] == 24000
    assert len(audio) / rate == pytest.approx(body["duration"], abs=1e-3)
    assert 1.0 < body["duration"] < 15.0
    assert abs(audio).max() > 0.01  # not silence
    assert httpx.get(f"{url}/health").json()["loaded"] is True
    rss_loaded = rss_mb(app_server.pid)

    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    speech = client.audio.speech.create(model="kokoro", voice="male_1", input="Hello from the box.",
                                        response_format="wav")
    wav, rate = sf.read(io.BytesIO(speech.content))
    assert rate == 24000 and len(wav) / rate > 0.5

    wait_health(url, lambda h: h["model_state"] == "not loaded", timeout=IDLE_MINUTES * 60 + 60)
    rss_unloaded = rss_mb(app_server.pid)

    r = httpx.post(f"{url}/tts", json={"text": "Once more.", "speaker": "child"}, timeout=300)
    assert r.status_code == 200 and httpx.get(f"{url}/health").json()["loaded"] is True
    rss_reloaded = rss_mb(app_server.pid)
    wait_health(url, lambda h: h["model_state"] == "not loaded", timeout=IDLE_MINUTES * 60 + 60)
    rss_unloaded_again = rss_mb(app_server.pid)

    figures = {"startup_s": app_server.startup_s, "rss_start_mb": rss_start,
               "rss_loaded_mb": rss_loaded, "rss_unloaded_mb": rss_unloaded,
               "rss_reloaded_mb": rss_reloaded, "rss_unloaded_again_mb": rss_unloaded_again}
    for name, value in figures.items():
        record_property(name, round(value, 1))
    print("web lazy-load/idle-unload figures:", {k: round(v, 1) for k, v in figures.items()})
    # The engine's sessions and buffers come back (~220 MB on the dev box); imported libraries and
    # the G2P dictionaries stay, so the floor is above the start but does not grow per cycle.
    assert rss_loaded - rss_unloaded > 100, "the model's memory did not come back after unload"
    assert rss_reloaded - rss_unloaded_again > 100
    assert rss_unloaded_again < rss_unloaded + 40, "memory grows with each load/unload cycle"
