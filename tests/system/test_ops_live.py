"""Operations wired into the live app: the janitor sweeps while the app serves, the governor throttles it."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from cosyedge.ops.janitor import Janitor, JanitorPolicy
from cosyedge.service.requests import TTSRequest
from cosyedge.host.thermal import ThermalGovernor, ThermalThresholds
from tests.helpers.waiting import Looks

pytestmark = pytest.mark.load

DAY = 24 * 3600.0


def make_old(path: Path, age_s: float = 2 * DAY, size: int = 4096) -> None:
    """Write a file that is already ``age_s`` old when it appears (the janitor may be watching)."""
    staging = path.parent.parent / f"staging-{path.name}"
    staging.write_bytes(b"\0" * size)
    os.utime(staging, (time.time() - age_s,) * 2)
    os.replace(staging, path)


def test_app_keeps_serving_while_the_janitor_runs(make_service, live_server, fake_factory, web_settings):
    fake_factory.engine_kwargs["delay"] = 0.02
    service = make_service()
    srv = live_server(service)
    out = web_settings.outputs_path
    for i in range(1000):
        make_old(out / f"old{i:05d}.wav")
        make_old(out / f"old{i:05d}.json", size=200)
    leased = out / "download.wav"
    make_old(leased)
    service.lease(leased)
    # Aggressive policy: everything not in use goes (age, and a count of 1); sweeps run back to back.
    policy = JanitorPolicy(max_age_s=3600, max_total_bytes=0, max_files=1, min_age_s=0)
    janitor = Janitor(out, policy, interval_s=0.005, in_use=service.in_use_paths).start()
    stop_filling = threading.Event()

    def fill() -> None:  # keep the janitor busy for the whole test
        n = 0
        while not stop_filling.is_set():
            make_old(out / f"late{n:06d}.wav")
            n += 1
            time.sleep(0.001)

    filler = threading.Thread(target=fill, name="filler")
    filler.start()
    try:
        def client(i: int) -> list[int]:
            codes = []
            with httpx.Client(base_url=srv.url, timeout=60) as http:
                for j in range(8):
                    r = http.post("/tts", json={"text": f"Client {i} request {j}. Second sentence.",
                                                "speaker": "female_1"})
                    codes.append(r.status_code)
                    if r.status_code == 200:
                        assert r.json()["duration"] > 0
                    codes.append(http.get("/health").status_code)
            return codes

        def ui_client() -> list[Path]:
            """Like the UI: jobs that write outputs/<job>.wav, which the page then downloads."""
            paths = []
            for j in range(6):
                job = service.submit(TTSRequest(text=f"Kept file {j}.", keep_file=True))
                assert job.wait(60)
                paths.append(job.outcome().path)
            return paths

        sweeps_before = janitor.sweeps
        with ThreadPoolExecutor(5) as pool:
            ui = pool.submit(ui_client)
            codes = [c for batch in pool.map(client, range(4)) for c in batch]
            kept = ui.result()
    finally:
        stop_filling.set()
        filler.join(10)
        sweeps = janitor.sweeps - sweeps_before
        janitor.stop()
    assert codes == [200] * 64, codes
    assert sweeps >= 2, f"only {sweeps} sweeps completed while the clients were served"
    assert not any(out.glob("old*")), "the janitor did not clear the old outputs"
    assert leased.exists(), "the janitor removed a file a client was downloading"
    assert len(kept) == 6 and all(p.exists() and p.stat().st_size > 44 for p in kept), \
        "the janitor removed a job's output while it was written or leased"


class Dial:
    """A sensor whose temperature the test sets; ``looks`` counts who read it (tests/helpers/waiting.py)."""

    def __init__(self, temp: float | None) -> None:
        self.temp = temp
        self.looks = Looks()

    def __call__(self) -> float | None:
        self.looks.record()
        return self.temp


def test_governor_throttles_the_live_app(make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.05
    dial = Dial(50.0)
    governor = ThermalGovernor(dial, ThermalThresholds(70, 80, 90, 5), base_concurrency=2,
                               base_threads=4, min_interval_s=0)
    service = make_service(thermal=governor)
    srv = live_server(service)
    tts = {"text": "Warm day. Second sentence.", "speaker": "female_1"}
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        health = http.get("/health").json()
        assert health["thermal"]["state"] == "normal" and health["thermal"]["temp_c"] == 50
        assert health["queue"]["limit"] == 2
        assert http.post("/tts", json=tts).status_code == 200

        dial.temp = 72.0  # warm: one job at a time
        health = http.get("/health").json()
        assert health["thermal"]["state"] == "warm" and health["queue"]["limit"] == 1
        with ThreadPoolExecutor(3) as pool:
            codes = list(pool.map(lambda _: http.post("/tts", json=tts).status_code, range(3)))
        assert codes == [200] * 3 and fake_factory.engine.peak <= 2
        fake_factory.engine.peak = 0
        with ThreadPoolExecutor(3) as pool:
            codes = list(pool.map(lambda _: http.post("/tts", json=tts).status_code, range(3)))
        assert codes == [200] * 3 and fake_factory.engine.peak == 1

        dial.temp = 91.0  # critical: refused with the temperature in the message
        r = http.post("/tts", json=tts)
        assert r.status_code == 429 and "91 °C" in r.json()["error"]["message"]
        assert http.get("/health").json()["thermal"]["refuse_new"] is True
        dial.temp = 86.0  # cooler, but not by the hysteresis: still refused
        assert http.post("/tts", json=tts).status_code == 429

        dial.temp = 84.0  # hot: accepted, but held until it cools
        result: dict = {}
        waiter = threading.Thread(target=lambda: result.update(r=http.post("/tts", json=tts)))
        waiter.start()
        deadline = time.monotonic() + 10
        while http.get("/health").json()["queue"]["waiting"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        health = http.get("/health").json()
        assert health["queue"]["waiting"] == 1 and health["queue"]["running"] == 0
        assert health["thermal"]["message"] == "cooling down (84 °C)"
        assert "84 °C (hot): cooling down (84 °C)" in service.status().line()  # the UI status line
        dial.looks.reset()
        dial.looks.wait_for_a_worker()  # stays held while hot: a worker looked and started nothing
        assert service.queue.stats().waiting == 1 and "r" not in result
        dial.temp = 60.0  # cooled: the held job runs
        waiter.join(30)
        assert result["r"].status_code == 200
        assert http.get("/health").json()["thermal"]["state"] == "normal"


def test_no_sensor_is_said_in_health(make_service, live_server):
    service = make_service(thermal=ThermalGovernor(None, ThermalThresholds(), 2, 2))
    health = httpx.get(f"{live_server(service).url}/health").json()
    assert health["thermal"]["state"] == "unknown" and health["thermal"]["temp_c"] is None
    assert "no temperature sensor" in health["thermal"]["message"]
    assert "temperature: no temperature sensor; not throttling" in service.status().line()


def test_app_starts_the_janitor_with_the_service_in_use_paths(make_service, web_settings):
    from app import start_janitor

    service = make_service()
    out = web_settings.outputs_path
    make_old(out / "stale.wav", age_s=3 * DAY)
    make_old(out / "leased.wav", age_s=3 * DAY)
    service.lease(out / "leased.wav")
    janitor = start_janitor(web_settings, service)
    try:
        deadline = time.monotonic() + 10
        while janitor.sweeps < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert any(t.name == "cosyedge-janitor" and t.daemon for t in threading.enumerate())
        assert janitor.interval_s == web_settings.janitor_interval_minutes * 60
    finally:
        janitor.stop()
    assert not (out / "stale.wav").exists() and (out / "leased.wav").exists()


def test_engine_loads_with_fewer_threads_while_warm(make_service, web_settings):
    import dataclasses

    settings = dataclasses.replace(web_settings, onnx_threads=4)
    dial = Dial(50.0)
    now = [0.0]
    governor = ThermalGovernor(dial, settings, 2, settings.threads, min_interval_s=0, clock=lambda: now[0])
    service = make_service(settings, thermal=governor)
    assert service.engine_settings().threads == 4
    dial.temp = 75.0
    assert service.engine_settings().threads == 2
    dial.temp = None  # sensor gone after a warm reading: warm's limits hold, and stay while it is unreadable
    assert service.engine_settings().threads == 2
    now[0] = governor.stale_hold_s + 1
    assert service.engine_settings().threads == 2
    dial.temp = 50.0  # it reads again, cool: no limit
    assert service.engine_settings().threads == 4
