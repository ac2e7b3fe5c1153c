"""The page's wait for a job: its progress reported while it runs, and the job cancelled when the
wait is (the event was cancelled or the page went away), so no job runs on for nobody; a new
voice's preparation as the bar's steps (:func:`voice_progress`)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from cosyedge.notes import code_of
from cosyedge.service.jobs import Job
from cosyedge.service.facade import Service
from cosyedge.web.page_words import bilingual_note

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


def voice_progress(phase: str) -> tuple[tuple[int, int], str] | None:
    """A ``voice_preparing`` phase (cosyedge.service.voice_progress) as the page's bar: (steps done,
    steps) and its words in both languages; None for any other phase."""
    if code_of(phase) != "voice_preparing":
        return None
    params = phase.params  # type: ignore[attr-defined]
    return (params["step"] - 1, params["total"]), bilingual_note(phase)
