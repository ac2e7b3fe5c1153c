"""AudioStream on its own, and streaming jobs through the queue and the service (fake engine)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from cosyedge.errors import CancelledError, EngineError
from cosyedge.service.jobs import JobQueue, JobState
from cosyedge.service.requests import TTSRequest
from cosyedge.service.streaming import AudioStream, StreamInfo


def test_pieces_reach_blocking_and_async_readers_in_order_and_the_error_comes_last():
    stream = AudioStream()
    got_sync: list[float] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            got_sync.extend(float(p[0]) for p in stream.pieces(timeout=5))
        except EngineError as exc:
            errors.append(exc)

    async def read_async() -> tuple[list[float], BaseException | None]:
        got: list[float] = []
        try:
            async for piece in stream.pieces_async():
                got.append(float(piece[0]))
        except EngineError as exc:
            return got, exc
        return got, None

    async def main() -> tuple[list[float], BaseException | None]:
        task = asyncio.ensure_future(read_async())
        deadline = time.monotonic() + 5
        while stream.readers < 2:  # both readers wait before the first piece comes
            assert time.monotonic() < deadline, "the readers never started"
            await asyncio.sleep(0.005)
        def produce() -> None:
            stream.start(StreamInfo(sample_rate=24000, engine="fake", model_id="m"))
            for value in (1.0, 2.0, 3.0):
                stream.put(np.full(10, value, np.float32))
                stream.put(np.zeros(0, np.float32))  # empty pieces are dropped
                time.sleep(0.02)
            stream.close(EngineError("boom"))
        await asyncio.to_thread(produce)
        return await asyncio.wait_for(task, 5)

    reader = threading.Thread(target=read)
    reader.start()
    got_async, error = asyncio.run(main())
    reader.join(5)
    assert got_sync == got_async == [1.0, 2.0, 3.0]
    assert isinstance(error, EngineError) and len(errors) == 1
    stream.close()  # a second close changes nothing
    assert isinstance(stream.error, EngineError)
    with pytest.raises(RuntimeError, match="closed"):
        stream.put(np.ones(3, np.float32))


def test_a_reader_arriving_after_the_end_still_gets_everything_until_released():
    stream = AudioStream()
    stream.put(np.ones(4, np.float32))
    stream.close()
    assert [p.size for p in stream.pieces()] == [4]
    stream.release()
    with pytest.raises(RuntimeError, match="released"):
        list(stream.pieces())


def test_job_cancelled_while_waiting_closes_its_stream():
    queue = JobQueue(concurrency=1, max_waiting=2)
    gate = threading.Event()
    try:
        queue.submit(lambda job: gate.wait(5))
        stream = AudioStream()
        job = queue.submit(lambda job: None, stream=stream)
        assert queue.cancel(job.id)
        assert stream.closed and isinstance(stream.error, CancelledError)
        with pytest.raises(CancelledError):
            list(stream.pieces(timeout=1))
    finally:
        gate.set()
        queue.shutdown()


def test_service_stream_pieces_join_to_the_result(make_service):
    service = make_service()
    job = service.submit(TTSRequest(text="One. Two words. Three more words here."), stream=True)
    pieces = list(job.stream.pieces(timeout=10))
    assert job.wait(10) and job.state is JobState.DONE
    result = job.outcome()
    assert len(pieces) == 3 == result.sentences
    np.testing.assert_array_equal(np.concatenate(pieces), result.audio)
    assert job.stream.info.sample_rate == 24000 and job.stream.info.report["voice_match"] == "preset"
    # the same request without streaming gives the same audio (no instruction: nothing per piece)
    plain = service.submit(TTSRequest(text="One. Two words. Three more words here."))
    assert plain.wait(10)
    np.testing.assert_array_equal(plain.outcome().audio, result.audio)


def test_streamed_effects_are_applied_per_piece_and_the_result_is_what_was_streamed(make_service):
    service = make_service()
    request = TTSRequest(text="One. Two words.", instruct="speak louder")
    job = service.submit(request, stream=True)
    pieces = list(job.stream.pieces(timeout=10))
    assert job.wait(10)
    result = job.outcome()
    np.testing.assert_array_equal(np.concatenate(pieces), result.audio)
    assert result.instruct["applied"], result.instruct  # the instruction did something
    quiet = service.submit(TTSRequest(text="One. Two words."))
    assert quiet.wait(10)
    assert np.abs(result.audio).max() > np.abs(quiet.outcome().audio).max() * 1.1


def test_streaming_jobs_keep_the_two_running_limit_and_write_the_file_at_the_end(make_service,
                                                                                 fake_factory):
    import soundfile as sf

    fake_factory.engine_kwargs["delay"] = 0.2
    service = make_service()
    jobs = [service.submit(TTSRequest(text="One. Two. Three.", keep_file=True), stream=True)
            for _ in range(3)]
    first = jobs[0]
    next(first.stream.pieces(timeout=10))  # audio is out before the file exists
    path = service.settings.outputs_path / f"{first.id}.wav"
    assert not first.finished and not path.exists()
    streamed = [np.concatenate(list(job.stream.pieces(timeout=20))) for job in jobs]
    assert all(job.wait(20) and job.state is JobState.DONE for job in jobs)
    assert fake_factory.engine.peak == 2  # the third waited
    for job, audio in zip(jobs, streamed):
        result = job.outcome()
        written, rate = sf.read(result.path, dtype="int16")
        assert rate == 24000 and result.path.name == f"{job.id}.wav"
        np.testing.assert_array_equal(written, np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16))
    assert not list(service.settings.outputs_path.glob(".tmp-*"))  # written atomically, no leftovers


def test_release_does_not_cut_a_reader_that_is_still_reading():
    """The queue releases old results while a slow client may still be reading: it gets all of it."""
    stream = AudioStream()
    for value in (1.0, 2.0, 3.0):
        stream.put(np.full(4, value, np.float32))
    stream.close()
    reader = stream.pieces(timeout=1)
    first = next(reader)
    stream.release()   # eight newer jobs finished meanwhile
    assert stream.released
    assert [float(first[0]), *(float(p[0]) for p in reader)] == [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="released"):   # a reader arriving now is turned away
        next(stream.pieces(timeout=1))
    assert stream.held_pieces == 0   # the last reader gone: the memory is dropped


def test_release_does_not_cut_an_async_reader_that_is_still_reading():
    stream = AudioStream()
    for value in (1.0, 2.0, 3.0):
        stream.put(np.full(4, value, np.float32))
    stream.close()

    async def main() -> list[float]:
        got: list[float] = []
        async for piece in stream.pieces_async():
            got.append(float(piece[0]))
            stream.release()
        return got

    assert asyncio.run(main()) == [1.0, 2.0, 3.0]
    assert stream.held_pieces == 0


def test_a_finished_streaming_job_holds_its_audio_once(make_service):
    """The stream's pieces and the result are the same memory, not two copies (newest 8 keep both)."""
    service = make_service()
    job = service.submit(TTSRequest(text="One. Two words. Three more words here."), stream=True)
    assert job.wait(10)
    result = job.outcome()
    pieces = list(job.stream.pieces(timeout=1))
    assert len(pieces) == 3
    np.testing.assert_array_equal(np.concatenate(pieces), result.audio)
    assert all(np.shares_memory(piece, result.audio) for piece in pieces)
