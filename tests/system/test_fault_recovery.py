"""Fault recovery: SIGKILL mid-job and restart, an engine that throws inside one job, a full disk.

Kill: no half-written WAV is served or kept, saved files are untouched, the restarted server works.
Engine exception: only that job fails (500 with a message); the others and later jobs succeed on the
same engine. Disk full: a clear 507 "storage_full" error, no temp file left, and the next job works
once there is room again.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from cosyedge.errors import EngineError, StorageFullError
from cosyedge.service.requests import TTSRequest
from tests.helpers import REPO
from tests.helpers.live_server import free_port
from tests.helpers.fake_engine import FakeEngine, FakeFactory

SAVED_VOICE = b'{"name": "teacher", "embedding": [0.5, 0.25]}'


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file()}


def start_fake_server(root: Path, port: int, delay: float) -> subprocess.Popen:
    log = root.parent / "server.log"  # a file, not a pipe: a full pipe would stall the server
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.fake_server", "--port", str(port),
                             "--root", str(root), "--delay", str(delay)], cwd=REPO,
                            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
                            stdout=subprocess.DEVNULL, stderr=log.open("ab"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(log.read_text()[-2000:])
    proc.kill()
    raise RuntimeError("fake server did not start")


@pytest.mark.slow
def test_sigkill_mid_job_then_restart(tmp_path):
    root = tmp_path / "box"
    outputs, prompts = root / "outputs", root / "prompts"
    outputs.mkdir(parents=True)
    prompts.mkdir()
    (prompts / "teacher.json").write_bytes(SAVED_VOICE)
    tone = 0.2 * np.sin(2 * np.pi * 220 * np.arange(24000) / 24000)
    sf.write(outputs / "earlier.wav", tone, 24000, subtype="PCM_16")
    saved_before, outputs_before = digest(prompts), digest(outputs)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_fake_server(root, port, delay=0.4)
    try:
        from gradio_client import Client

        client = Client(url, verbose=False, download_files=str(tmp_path / "dl"),
                        analytics_enabled=False)
        text = " ".join(f"Sentence {i}." for i in range(20))
        job = client.submit("female_1", text, 1.0, "auto", None, api_name="/preset")  # writes outputs/
        rest = threading.Thread(target=lambda: _swallow(lambda: httpx.post(
            f"{url}/tts", json={"text": text, "job_id": "rest-1"}, timeout=60)), daemon=True)
        rest.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = httpx.get(f"{url}/jobs", timeout=5).json()["jobs"]
            if sum(1 for j in jobs if j["progress"]["done"] >= 1) >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("jobs never got going")
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        _swallow(job.result)
        _swallow(client.close)
    finally:
        if server.poll() is None:
            server.kill()
    # What a kill during the atomic write itself leaves behind: a temp file with part of a WAV.
    (outputs / ".tmp-k1ll3d.wav").write_bytes(sf_bytes(tone)[:300])
    for wav in outputs.glob("*.wav"):  # every file under a final name is complete
        audio, rate = sf.read(wav)
        assert len(audio) > 0 and rate == 24000, wav
    server = start_fake_server(root, port, delay=0.0)
    try:
        assert not list(outputs.glob(".tmp-*")), "the restart kept a half-written file"
        assert "removed 1 half-written file" in (tmp_path / "server.log").read_text()
        r = httpx.get(f"{url}/gradio_api/file={outputs.resolve()}/.tmp-k1ll3d.wav")
        assert r.status_code == 404
        assert digest(prompts) == saved_before, "a saved voice changed"
        assert {k: v for k, v in digest(outputs).items() if k in outputs_before} == outputs_before
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok" and health["queue"]["running"] == 0
        r = httpx.post(f"{url}/tts", json={"text": "After the crash."}, timeout=60)
        assert r.status_code == 200 and r.json()["duration"] > 0.1
        assert httpx.get(f"{url}/jobs/rest-1").status_code == 404  # nothing half-remembered
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


def sf_bytes(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio, 24000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _swallow(fn) -> None:
    try:
        fn()
    except Exception:  # the server was killed under it: any error is expected here
        pass


class ExplodingEngine(FakeEngine):
    """Raises in the middle of any text containing BOOM (after its first sentence)."""

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        for index, chunk in enumerate(super().synthesize(text, voice, options, progress, cancelled)):
            if "BOOM" in getattr(text, "text", text) and index == 1:  # the text or its TextAnalysis
                raise RuntimeError("onnxruntime: simulated kernel failure")
            yield chunk


def test_engine_exception_fails_only_that_job(make_service, live_server):
    class Factory(FakeFactory):
        def __call__(self):
            self.loads += 1
            self.engine = ExplodingEngine(delay=0.2)
            return self.engine

    factory = Factory()
    service = make_service(factory=factory)
    server = live_server(service)
    texts = ["One. Two. Three.", "First. BOOM. Third.", "Four. Five.", "Six. Seven."]

    def call(text: str) -> httpx.Response:
        return httpx.post(f"{server.url}/tts", json={"text": text}, timeout=60)

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(call, texts))
    codes = [r.status_code for r in responses]
    assert codes == [200, 500, 200, 200], codes
    error = responses[1].json()["error"]
    assert error["type"] == "engine_error" and "simulated kernel failure" in error["message"]
    assert httpx.post(f"{server.url}/tts", json={"text": "Afterwards."}, timeout=30).status_code == 200
    assert factory.loads == 1, "the engine was reloaded after one job failed"
    health = httpx.get(f"{server.url}/health").json()
    assert health["loaded"] and health["queue"]["running"] == 0


def test_engine_that_fails_to_load_once_recovers_on_the_next_job(make_service):
    class FlakyFactory(FakeFactory):
        def __call__(self):
            if self.loads == 0:
                self.loads += 1
                raise RuntimeError("model file busy")
            return super().__call__()

    factory = FlakyFactory()
    service = make_service(factory=factory)
    first = service.submit(TTSRequest(text="Hello."))
    assert first.wait(10)
    with pytest.raises(EngineError, match="model file busy"):
        first.outcome()
    second = service.submit(TTSRequest(text="Hello again."))
    assert second.wait(10) and second.outcome().duration > 0
    assert service.status().model_state == "loaded"


@pytest.fixture
def tiny_outputs(tmp_path):
    """outputs/ on a 1 MiB tmpfs (root), else None: the test then simulates ENOSPC instead."""
    mount = tmp_path / "outputs"
    mount.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        yield None
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_on_outputs_gives_a_clear_error_and_the_janitor_frees_space(
        make_service, web_settings, tiny_outputs, monkeypatch):
    from cosyedge.ops.janitor import Janitor

    # the free-disk guard would refuse this job before it runs (tests/test_service_lessons.py):
    # off here, since this is about a write that fails
    service = make_service(dataclasses.replace(web_settings, min_free_disk_mb=0))
    outputs = web_settings.outputs_path
    if tiny_outputs is not None:
        assert os.statvfs(outputs).f_blocks * os.statvfs(outputs).f_frsize <= 1024 * 1024
    # Yesterday's lessons fill the (tiny) disk: 4 x 200 KB on a 1 MiB tmpfs.
    two_days_ago = time.time() - 2 * 24 * 3600
    for i in range(4):
        old = outputs / f"old-lesson-{i}.wav"
        old.write_bytes(b"RIFF" + b"\0" * (200 * 1024))
        os.utime(old, (two_days_ago, two_days_ago))
    long_text = " ".join(f"This is sentence number {i} of a long lesson." for i in range(15))
    if tiny_outputs is None:  # not root: make every fsync in the atomic write fail as a full disk
        def full(_fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr("cosyedge.audio.os.fsync", full)
    job = service.submit(TTSRequest(text=long_text, keep_file=True))
    assert job.wait(30)
    with pytest.raises(StorageFullError) as info:
        job.outcome()
    assert info.value.http_status == 507 and "full" in info.value.message
    assert str(outputs) in info.value.message
    print("disk full message:", info.value.message)
    assert not list(outputs.glob(".tmp-*")), "a temp file was left behind"
    assert sorted(p.name for p in outputs.glob("*.wav")) == [f"old-lesson-{i}.wav" for i in range(4)]
    # The janitor's sweep (what its thread does every few minutes) removes the old outputs...
    removed = Janitor.from_settings(web_settings, in_use=service.in_use_paths).run_once()
    assert len(removed) == 4 and not list(outputs.glob("old-lesson-*"))
    monkeypatch.undo()
    # ...and the same job now writes its file.
    job = service.submit(TTSRequest(text=long_text, keep_file=True))
    assert job.wait(30)
    path = job.outcome().path
    assert path is not None and sf.read(path)[0].size > 0


@pytest.mark.slow  # ~5.5 s: the page's server, a gradio client, its 2 s shutdown
def test_disk_full_reaches_the_page_as_a_message(make_service, web_settings, live_server,
                                                 monkeypatch, tmp_path):
    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    service = make_service()
    server = live_server(service, with_ui=True)
    monkeypatch.setattr("cosyedge.audio.os.fsync", full)
    from gradio_client import Client

    client = Client(server.url, verbose=False, download_files=str(tmp_path / "dl"),
                    analytics_enabled=False)
    try:
        with pytest.raises(Exception, match="is full"):
            client.predict("female_1", "Hello.", 1.0, "auto", None, api_name="/preset")
    finally:
        client.close()
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
