"""Concurrency, busy answers and cancellation against a live server with a slowed engine."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from cosyedge.service.jobs import JobState

pytestmark = pytest.mark.load

SLOW_TEXT = "One. Two. Three."


@pytest.fixture
def slow_server(make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.5  # 1.5 s per job
    service = make_service()
    srv = live_server(service)
    srv.service = service
    srv.factory = fake_factory
    return srv


def test_twelve_clients_two_run_eight_wait_rest_get_429(slow_server):
    barrier = threading.Barrier(12)

    def client(i: int) -> httpx.Response:
        barrier.wait()
        return httpx.post(f"{slow_server.url}/tts", json={"text": SLOW_TEXT, "speaker": "male_1"},
                          timeout=120)

    with ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(client, range(12)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 10 + [429] * 2, codes
    for r in responses:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["type"] == "busy" and "busy" in r.json()["error"]["message"]
        else:
            assert r.json()["duration"] > 0
    assert slow_server.factory.engine.peak == 2, "more than 2 jobs synthesized at once"
    assert slow_server.factory.loads == 1


def test_rest_cancel_stops_a_job_between_sentences(slow_server):
    text = " ".join(f"Sentence number {i}." for i in range(12))
    result: dict = {}

    def call() -> None:
        result["r"] = httpx.post(f"{slow_server.url}/tts", json={"text": text, "job_id": "lesson-1"},
                                 timeout=60)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = httpx.get(f"{slow_server.url}/jobs/lesson-1")
        if r.status_code == 200 and r.json()["progress"]["done"] >= 1:
            break
        time.sleep(0.05)
    else:
        pytest.fail("job never made progress")
    r = httpx.delete(f"{slow_server.url}/jobs/lesson-1")
    assert r.status_code == 200 and r.json()["cancelled"] is True
    thread.join(10)
    response = result["r"]
    assert response.status_code == 499 and response.json()["error"]["type"] == "cancelled"
    done = slow_server.factory.engine.sentences_done
    assert 1 <= done <= 3, f"{done} sentences synthesized after cancel"
    job = httpx.get(f"{slow_server.url}/jobs/lesson-1").json()
    assert job["state"] == "cancelled"
    assert httpx.delete(f"{slow_server.url}/jobs/nope").status_code == 404


def test_client_disconnect_cancels_its_job(slow_server):
    text = " ".join(f"Sentence number {i}." for i in range(12))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{slow_server.url}/tts", json={"text": text, "job_id": "gone-1"}, timeout=1.2)
    job = slow_server.service.queue.get("gone-1")
    assert job is not None and job.wait(5), "job kept running after the client left"
    assert job.state is JobState.CANCELLED
    assert slow_server.factory.engine.sentences_done < 6


@pytest.mark.parametrize("path, body", [
    ("/tts", {"text": SLOW_TEXT}),
    ("/v1/audio/speech", {"model": "tts-1", "input": SLOW_TEXT, "voice": "male_1",
                          "response_format": "pcm", "stream_format": "audio"}),
])
def test_a_waiting_jobs_client_leaving_frees_its_place_at_once(slow_server, path, body):
    text = " ".join(f"Sentence number {i}." for i in range(12))
    busy = [threading.Thread(target=httpx.post, args=(f"{slow_server.url}/tts",),
                             kwargs={"json": {"text": text, "job_id": f"busy-{i}"}, "timeout": 60})
            for i in range(2)]
    for thread in busy:
        thread.start()
    queue = slow_server.service.queue
    try:
        deadline = time.monotonic() + 10
        while queue.stats().running < 2:
            assert time.monotonic() < deadline, "the two long jobs never started"
            time.sleep(0.02)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{slow_server.url}{path}", json=body, timeout=0.5)
        left = [job for job in queue.active_jobs() if not job.id.startswith("busy-")]
        assert all(job.wait(2) for job in left), "a waiting job outlived its client"
        assert queue.stats().waiting == 0 and queue.stats().running == 2
    finally:
        for i in range(2):
            httpx.delete(f"{slow_server.url}/jobs/busy-{i}")
        for thread in busy:
            thread.join(10)
