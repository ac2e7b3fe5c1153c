"""A job whose end outlasts its stream: the stream closes as the job ends, and the queue's bookkeeping
runs before the job counts as finished; on a busy box that gap is long enough for a server to see
the stream over and the job not yet finished."""

from __future__ import annotations

import time


def slow_job_end(monkeypatch, seconds: float = 0.5) -> list:  # noqa: ANN001
    """Make the queue's bookkeeping of each ended job take ``seconds`` more (the gap between the
    stream's close and the job's ``finished``); returns the ids of the jobs it slowed."""
    from cosyedge.service.jobs import JobQueue

    slowed: list = []
    release = JobQueue._release_ended

    def slow_release(queue, job):  # noqa: ANN001, ANN202
        slowed.append(job.id)
        time.sleep(seconds)
        return release(queue, job)

    monkeypatch.setattr(JobQueue, "_release_ended", slow_release)
    return slowed
