"""Streaming `/v1/audio/speech` (`stream_format: "audio"`) on a live server with the fake engine."""

from __future__ import annotations

import io
import logging
import struct
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from cosyedge.errors import EngineError
from cosyedge.service.jobs import JobState
from tests.helpers.fake_engine import FakeEngine, FakeFactory
from tests.helpers.job_tail import slow_job_end

TEXT = "First sentence here. The second one is a little longer. Third."


def speech(url: str, **body) -> httpx.Response:
    payload = {"model": "tts-1", "input": TEXT, "voice": "female_1", **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=30)


def test_streamed_wav_and_pcm_decode_to_the_same_audio_as_the_whole_file(server):
    whole = speech(server.url, response_format="wav")
    assert whole.status_code == 200 and whole.headers["x-cosyedge-streamed"] == "false"
    reference, rate = sf.read(io.BytesIO(whole.content), dtype="int16")

    wav = speech(server.url, response_format="wav", stream_format="audio")
    assert wav.status_code == 200, wav.text
    assert wav.headers["x-cosyedge-streamed"] == "true" and wav.headers["content-type"] == "audio/wav"
    assert "content-length" not in wav.headers  # sent as it is made
    riff_size, data_size = struct.unpack("<I", wav.content[4:8])[0], struct.unpack("<I", wav.content[40:44])[0]
    assert riff_size == data_size == 0xFFFFFFFF  # unknown length, documented in docs/web.md
    streamed, streamed_rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert streamed_rate == rate == 24000
    np.testing.assert_array_equal(streamed, reference)

    pcm = speech(server.url, response_format="pcm", stream_format="audio")
    assert pcm.status_code == 200
    # little-endian raw PCM: not audio/L16, which RFC 2586 defines as big-endian
    assert pcm.headers["content-type"] == "audio/pcm; rate=24000; channels=1; bits=16; endianness=little"
    np.testing.assert_array_equal(np.frombuffer(pcm.content, "<i2"), reference)
    assert pcm.headers["x-cosyedge-sample-rate"] == "24000"
    assert '"voice_match": "preset"' in pcm.headers["x-cosyedge-report"]


def test_other_formats_with_stream_format_come_whole(server):
    r = speech(server.url, response_format="flac", stream_format="audio")
    assert r.status_code == 200 and r.headers["x-cosyedge-streamed"] == "false"
    assert sf.info(io.BytesIO(r.content)).format == "FLAC"


@pytest.mark.parametrize("body, status, kind", [
    ({"input": "   "}, 400, "invalid_text"),
    ({"voice": "darth"}, 404, "not_found"),
    ({"speed": 9.0}, 400, "invalid_parameter"),
    ({"stream_format": "sse"}, 400, "invalid_request"),
])
def test_bad_input_is_json_4xx_before_any_audio(server, body, status, kind):
    r = speech(server.url, **{"response_format": "wav", "stream_format": "audio", **body})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == kind


class FailingEngine(FakeEngine):
    """Fails at sentence ``fail_at`` (0 = before any audio)."""

    def __init__(self, fail_at: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_at = fail_at

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        for index, chunk in enumerate(super().synthesize(text, voice, options, progress, cancelled)):
            if index == self.fail_at:
                raise EngineError("the model broke")
            yield chunk


def failing_server(make_service, live_server, fail_at: int):
    factory = FakeFactory()
    factory.engine_kwargs = {"fail_at": fail_at}
    service = make_service(factory=lambda: FailingEngine(fail_at))
    return live_server(service)


def test_engine_failure_before_the_first_chunk_is_a_json_error(make_service, live_server):
    srv = failing_server(make_service, live_server, fail_at=0)
    r = speech(srv.url, response_format="pcm", stream_format="audio")
    assert r.status_code == 500 and r.json()["error"]["type"] == "engine_error"


def test_engine_failure_after_the_first_chunk_ends_the_stream_and_is_logged(make_service, live_server,
                                                                           caplog):
    srv = failing_server(make_service, live_server, fail_at=1)
    reference = speech(live_server(make_service()).url, response_format="pcm", stream_format="audio")
    with caplog.at_level(logging.WARNING, logger="cosyedge.web.api"):
        r = speech(srv.url, response_format="pcm", stream_format="audio")
    assert r.status_code == 200  # the status left with the first byte
    samples = np.frombuffer(r.content, "<i2")
    first_sentence = int((0.1 + 0.01 * len("First sentence here.")) * 24000)
    assert samples.size == first_sentence  # only the first chunk, then the end
    np.testing.assert_array_equal(samples, np.frombuffer(reference.content, "<i2")[:first_sentence])
    assert "ended early" in caplog.text and "the model broke" in caplog.text


@pytest.fixture
def slow_server(make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.4
    service = make_service()
    srv = live_server(service)
    srv.service = service
    srv.factory = fake_factory
    return srv


LONG_TEXT = " ".join(f"Sentence number {i}." for i in range(10))


@pytest.mark.slow  # ~4 s: ten sentences at 0.4 s each, in real time
def test_first_bytes_arrive_while_the_job_still_runs(slow_server):
    payload = {"model": "tts-1", "input": LONG_TEXT, "voice": "female_1", "response_format": "pcm",
               "stream_format": "audio"}
    start = time.monotonic()
    with httpx.stream("POST", f"{slow_server.url}/v1/audio/speech", json=payload, timeout=30) as r:
        assert r.status_code == 200
        job = slow_server.service.queue.get(r.headers["x-cosyedge-job-id"])
        chunks = r.iter_bytes()
        first = next(chunks)
        first_at = time.monotonic() - start
        assert first and job.state is JobState.RUNNING and job.done_steps < 10
        rest = b"".join(chunks)
    total = time.monotonic() - start
    assert job.state is JobState.DONE
    assert first_at < 2.0 < total  # 10 sentences x 0.4 s; the first after about one
    whole = np.frombuffer(first + rest, "<i2")
    assert whole.size / 24000 > 10 * 0.25


def test_client_closing_the_stream_cancels_its_job(slow_server):
    payload = {"model": "tts-1", "input": LONG_TEXT, "voice": "female_1", "response_format": "wav",
               "stream_format": "audio"}
    with httpx.stream("POST", f"{slow_server.url}/v1/audio/speech", json=payload, timeout=30) as r:
        job = slow_server.service.queue.get(r.headers["x-cosyedge-job-id"])
        next(r.iter_bytes())
    assert job.wait(5), "job kept running after the client left"
    assert job.state is JobState.CANCELLED
    assert slow_server.factory.engine.sentences_done < 10


def test_delete_during_the_stream_cancels_and_ends_it(slow_server):
    payload = {"model": "tts-1", "input": LONG_TEXT, "voice": "female_1", "response_format": "pcm",
               "stream_format": "audio"}
    with httpx.stream("POST", f"{slow_server.url}/v1/audio/speech", json=payload, timeout=30) as r:
        job_id = r.headers["x-cosyedge-job-id"]
        chunks = r.iter_bytes()
        received = len(next(chunks))
        assert httpx.delete(f"{slow_server.url}/jobs/{job_id}").json()["cancelled"] is True
        received += sum(len(c) for c in chunks)   # the stream ends (no hang) after at most a sentence
    job = slow_server.service.queue.get(job_id)
    assert job.state is JobState.CANCELLED
    assert 0 < received < 10 * 0.25 * 24000 * 2


def test_cancel_before_the_first_chunk_is_a_json_499(slow_server):
    payload = {"model": "tts-1", "input": LONG_TEXT, "voice": "female_1", "response_format": "pcm",
               "stream_format": "audio"}
    result: dict = {}

    def call() -> None:
        result["r"] = httpx.post(f"{slow_server.url}/v1/audio/speech", json=payload, timeout=30)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 10
    while not slow_server.service.queue.active_jobs():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    job = slow_server.service.queue.active_jobs()[0]
    assert slow_server.service.cancel(job.id)
    thread.join(10)
    assert result["r"].status_code == 499 and result["r"].json()["error"]["type"] == "cancelled"


def test_a_ui_jobs_audio_is_readable_with_its_token_only(server):
    from cosyedge.service.requests import TTSRequest

    job = server.service.submit(TTSRequest(text=TEXT), owner="ui:x", stream=True)
    assert job.wait(10)
    url = f"{server.url}/jobs/{job.id}/audio"
    for token in ("", "wrong", job.stream.token[:-1]):
        r = httpx.get(url, params={"token": token}, timeout=10)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = httpx.get(url, params={"token": job.stream.token}, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    audio, _ = sf.read(io.BytesIO(r.content), dtype="float32")
    expected = np.round(np.clip(job.outcome().audio, -1, 1) * 32767) / 32768
    np.testing.assert_allclose(audio, expected, atol=1e-6)
    assert httpx.get(f"{server.url}/jobs/nope/audio", params={"token": "x"}).status_code == 404
    plain = server.service.submit(TTSRequest(text=TEXT))   # not streamed: no audio stream to read
    assert plain.wait(10)
    assert httpx.get(f"{server.url}/jobs/{plain.id}/audio", params={"token": ""}).status_code == 404


def test_a_released_streams_audio_is_a_json_404_not_an_empty_200(server):
    from cosyedge.service.requests import TTSRequest

    job = server.service.submit(TTSRequest(text=TEXT), owner="ui:x", stream=True)
    assert job.wait(10)
    job.release_result()   # what the queue does once eight newer jobs have finished
    r = httpx.get(f"{server.url}/jobs/{job.id}/audio", params={"token": job.stream.token}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    assert "released" in r.json()["error"]["message"]


def test_access_log_lines_never_show_a_stream_token():
    """uvicorn logs each request's path with its query: the audio route's token must not be there."""
    from cosyedge.web.api import install_log_redaction

    access = logging.getLogger("uvicorn.access")
    install_log_redaction()
    install_log_redaction()   # idempotent: one filter however often the app is built
    assert sum(type(f).__name__ == "TokenRedactingFilter" for f in access.filters) == 1
    record = access.makeRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/jobs/ab/audio?token=S3cr-et_x&x=1", "1.1", 200),
                               None)
    assert all(f.filter(record) for f in access.filters)
    line = record.getMessage()
    assert "S3cr" not in line and "/jobs/ab/audio?token=" in line and line.endswith('&x=1 HTTP/1.1" 200')


@pytest.mark.parametrize("fails_at", ["http.response.start", "http.response.body"])
def test_a_send_that_fails_mid_stream_cancels_the_job_at_once(make_service, fake_factory, fails_at):
    """The ASGI server reports a gone client by raising from send(): the job must stop then, not
    whenever the abandoned body generator happens to be garbage-collected; and the response stops
    reading the job's stream (release waits for readers), even if its body never started."""
    import asyncio
    import json as jsonlib

    from cosyedge.web.api import create_api

    fake_factory.engine_kwargs["delay"] = 0.4
    service = make_service()
    app = create_api(service)
    body = jsonlib.dumps({"model": "tts-1", "input": LONG_TEXT, "voice": "female_1",
                          "response_format": "pcm", "stream_format": "audio"}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/audio/speech",
             "raw_path": b"/v1/audio/speech", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 7860)}
    sent: list[dict] = []

    def job_id(messages: list[dict]) -> str:
        """The job's id, from the response's start message (sent even when the send then fails)."""
        return dict(messages[0]["headers"])[b"x-cosyedge-job-id"].decode()

    async def main() -> BaseException | None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            await asyncio.sleep(60)   # the client is silent; its disconnect shows up in send()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if message["type"] == fails_at:
                raise OSError("client gone")

        kept = None
        try:
            await app(scope, receive, send)
        except BaseException as exc:  # noqa: BLE001 - kept, as a server's log would keep it
            kept = exc
        job = service.queue.get(job_id(sent))
        for _ in range(300):   # the event loop keeps running, as a server's does
            if job.finished:
                break
            await asyncio.sleep(0.01)
        assert job.finished, "job kept running after the server said the client was gone"
        assert job.stream.readers == 0, "the response still counts as a reader of the stream"
        return kept

    kept = asyncio.run(main())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    job = service.queue.get(job_id(sent))
    assert job.state is JobState.CANCELLED and kept is not None
    assert fake_factory.engine.sentences_done < 10


def test_a_full_queue_is_a_json_429_for_streams_too(slow_server):
    from cosyedge.service.requests import TTSRequest

    queue = slow_server.service.queue
    jobs = [slow_server.service.submit(TTSRequest(text=LONG_TEXT))
            for _ in range(queue.concurrency + queue.max_waiting)]
    try:
        r = speech(slow_server.url, response_format="pcm", stream_format="audio")
        assert r.status_code == 429 and r.json()["error"]["type"] == "busy"
        assert int(r.headers["retry-after"]) >= 1
        assert len(queue.active_jobs()) == len(jobs)   # nothing was queued for the refused stream
    finally:
        for job in jobs:
            slow_server.service.cancel(job.id)


def test_a_stream_read_to_its_end_lets_the_job_finish(make_service, live_server, monkeypatch, caplog):
    """The stream closes as the job ends, before the job counts as finished: a client that read
    everything has not gone away, so the job must end done, not cancelled."""
    slowed = slow_job_end(monkeypatch)
    service = make_service()
    srv = live_server(service)
    with caplog.at_level(logging.INFO, logger="cosyedge.web.api"):
        r = speech(srv.url, response_format="pcm", stream_format="audio")
        assert r.status_code == 200 and len(r.content) > 0
        job = service.job(r.headers["x-cosyedge-job-id"])
        assert job is not None and job.wait(10)
    assert slowed == [job.id] and job.state is JobState.DONE, job.outcome()
    assert "stopped before the end" not in caplog.text
