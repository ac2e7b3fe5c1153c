"""Memory over many jobs: finished jobs must not keep their audio alive."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from cosyedge.service.jobs import KEEP_RESULTS
from cosyedge.service.requests import TTSRequest

pytestmark = pytest.mark.load


def settled(service, timeout: float = 5.0) -> None:
    """Wait until no job is running: a worker files a finished job (and releases old results)
    just after the job's waiters wake, so a check right after ``wait`` can run ahead of it."""
    deadline = time.monotonic() + timeout
    while service.queue.stats().running:
        assert time.monotonic() < deadline, "the queue still has a running job"
        time.sleep(0.01)


def test_finished_jobs_release_their_audio(make_service):
    service = make_service()
    first = service.submit(TTSRequest(text="A sentence that makes some audio."))
    assert first.wait(10)
    audio = weakref.ref(first.outcome().audio)
    for i in range(KEEP_RESULTS + 2):
        job = service.submit(TTSRequest(text=f"Job number {i}."))
        assert job.wait(10) and job.outcome().duration > 0
    settled(service)
    gc.collect()
    assert audio() is None, "the queue still holds the audio of a job finished long ago"
    assert service.queue.get(first.id).state.value == "done"  # still findable by id
    with pytest.raises(RuntimeError, match="released"):
        first.outcome()


def test_async_waiters_get_their_result_even_when_many_jobs_finish_at_once(make_service):
    service = make_service()

    async def main() -> list[float]:
        jobs = [service.submit(TTSRequest(text=f"Quick {i}.")) for i in range(KEEP_RESULTS)]
        deadline = time.monotonic() + 30
        while not all(job.finished for job in jobs):  # all finish before anyone awaits
            assert time.monotonic() < deadline, "the jobs did not finish"
            await asyncio.sleep(0.05)
        return [(await job.wait_async()).duration for job in jobs]

    assert all(d > 0 for d in asyncio.run(main()))
    late = service.submit(TTSRequest(text="Late."))
    assert late.wait(10)
    for i in range(KEEP_RESULTS):
        assert service.submit(TTSRequest(text=f"More {i}.")).wait(10)
    settled(service)
    with pytest.raises(RuntimeError, match="released"):  # a clear error, never a silent None
        asyncio.run(late.wait_async())
