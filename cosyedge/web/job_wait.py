"""The page's wait for a job: its progress reported while it runs, and the job cancelled when the
wait is (the event was cancelled or the page went away), so no job runs on for nobody."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from cosyedge.service.jobs import Job
from cosyedge.service.facade import Service

#: How often the wait reports progress (seconds).
REPORT_EVERY_S = 0.25


async def wait_reporting(service: Service, job: Job, report: Callable[[Job], None]) -> Any:
    """``job``'s result (or its error raised again), calling ``report(job)`` every
    :data:`REPORT_EVERY_S` until it finishes."""
    waiter = asyncio.ensure_future(job.wait_async())
    try:
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=REPORT_EVERY_S)
            if done:
                return waiter.result()
            report(job)
    finally:
        if not job.finished:
            service.cancel(job.id)  # through the queue: a waiting job leaves the waiting list now
            waiter.cancel()
