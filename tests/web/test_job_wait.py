"""The page's wait for a job: progress reported while it runs, the job cancelled with the wait."""

from __future__ import annotations

import asyncio

from cosyedge.service.requests import TTSRequest
from cosyedge.web.job_wait import wait_reporting
from tests.helpers.fake_engine import FakeFactory


def test_the_wait_reports_then_returns_the_result(make_service):
    service = make_service(factory=FakeFactory(delay=0.3))
    job = service.submit(TTSRequest(text="One. Two."))
    seen: list[str] = []
    result = asyncio.run(wait_reporting(service, job, lambda j: seen.append(j.phase)))
    assert result is job.outcome() and result.duration > 0
    assert seen, "nothing was reported while the job ran"


def test_a_cancelled_wait_cancels_its_job(make_service):
    service = make_service(factory=FakeFactory(delay=0.5))
    job = service.submit(TTSRequest(text="One. Two. Three. Four. Five. Six."))

    async def wait_then_leave() -> None:
        task = asyncio.ensure_future(wait_reporting(service, job, lambda j: None))
        await asyncio.sleep(0.4)
        task.cancel()  # the page went away
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(wait_then_leave())
    assert job.wait(5) and job.is_cancelled(), job.phase
