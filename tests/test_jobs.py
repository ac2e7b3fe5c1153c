"""JobQueue: concurrency limit, bounded waiting list, FIFO, cancel, thermal limits."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from cosyedge.errors import BusyError, CancelledError, EngineError, TextError
from cosyedge.service.jobs import JobQueue, JobState
from cosyedge.host.thermal import ThermalSnapshot
from tests.helpers.waiting import Looks


class Gate:
    """Work functions that block until released, recording how many run at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.order: list[int] = []

    def work(self, n: int):
        def fn(job):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
                self.order.append(n)
            try:
                while not self.release.wait(0.01):
                    if job.is_cancelled():
                        raise CancelledError("stopped")
                return n
            finally:
                with self.lock:
                    self.active -= 1
        return fn


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_runs_at_most_concurrency_and_refuses_beyond_waiting_list():
    gate = Gate()
    queue = JobQueue(concurrency=2, max_waiting=3)
    try:
        jobs = [queue.submit(gate.work(i)) for i in range(5)]
        wait_for(lambda: queue.stats().running == 2)
        with pytest.raises(BusyError) as info:
            queue.submit(gate.work(99))
        assert info.value.retry_after >= 1
        stats = queue.stats()
        assert (stats.running, stats.waiting) == (2, 3)
        assert [queue.position(j) for j in jobs[2:]] == [1, 2, 3]
        assert queue.position(jobs[0]) is None
        gate.release.set()
        assert all(j.wait(5) for j in jobs)
        assert [j.outcome() for j in jobs] == [0, 1, 2, 3, 4]
        assert gate.peak == 2
        assert gate.order[:2] == [0, 1] or gate.order[:2] == [1, 0]
        assert gate.order[2:] == [2, 3, 4]  # FIFO
    finally:
        queue.shutdown()


def test_a_waiter_woken_by_the_end_of_a_job_never_sees_it_running():
    """A model switch checks "nothing running" right after job.wait(): the queue must have let
    the job go by then, even when a slow done-callback still runs on the worker."""
    queue = JobQueue(concurrency=1, max_waiting=1)
    try:
        go = threading.Event()
        job = queue.submit(lambda job: go.wait(5) and "ok")
        job.add_done_callback(lambda job: time.sleep(0.3))
        go.set()
        assert job.wait(5)
        assert queue.stats().running == 0
        assert queue.active_jobs() == []
    finally:
        queue.shutdown()


def test_cancel_waiting_job_finishes_it_at_once_and_frees_its_place():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=1)
    try:
        running = queue.submit(gate.work(0))
        wait_for(lambda: running.state is JobState.RUNNING)
        waiting = queue.submit(gate.work(1))
        assert queue.cancel(waiting.id)
        assert waiting.finished and waiting.state is JobState.CANCELLED
        with pytest.raises(CancelledError):
            waiting.outcome()
        replacement = queue.submit(gate.work(2))  # the waiting list has room again
        assert queue.cancel(running.id)
        assert running.wait(5) and running.state is JobState.CANCELLED
        gate.release.set()
        assert replacement.wait(5) and replacement.outcome() == 2
        assert 1 not in gate.order
    finally:
        queue.shutdown()


def test_a_job_submitted_cancelled_never_runs_nor_takes_a_place():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=1)
    try:
        gone = queue.submit(gate.work(0), owner="ui:a", cancelled=True)
        assert gone.finished and gone.state is JobState.CANCELLED
        with pytest.raises(CancelledError):
            gone.outcome()
        assert queue.get(gone.id) is gone  # still findable, like any finished job
        running = queue.submit(gate.work(1))  # neither slot nor waiting place was taken
        wait_for(lambda: running.state is JobState.RUNNING)
        waiting = queue.submit(gate.work(2))
        gate.release.set()
        assert running.wait(5) and waiting.wait(5) and waiting.outcome() == 2
        assert 0 not in gate.order
    finally:
        queue.shutdown()


def test_cancel_owner_and_unknown_ids():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=4)
    try:
        a = queue.submit(gate.work(0), owner="ui:a")
        b = queue.submit(gate.work(1), owner="ui:b")
        c = queue.submit(gate.work(2), owner="ui:a")
        assert queue.cancel_owner("ui:a") == 2
        assert a.wait(5) and c.wait(5)
        assert not queue.cancel("nope")
        gate.release.set()
        assert b.wait(5) and b.outcome() == 1
        assert not queue.cancel(b.id)  # already finished
    finally:
        queue.shutdown()


def test_errors_keep_their_type_and_bugs_become_engine_errors():
    queue = JobQueue(concurrency=1, max_waiting=2)
    try:
        def bad_input(job):
            raise TextError("nothing speakable")

        def bug(job):
            raise ZeroDivisionError("oops")

        j1, j2 = queue.submit(bad_input), queue.submit(bug)
        assert j1.wait(5) and j2.wait(5)
        assert j1.state is JobState.FAILED and isinstance(j1.error, TextError)
        assert isinstance(j2.error, EngineError) and "ZeroDivisionError" in j2.error.message
    finally:
        queue.shutdown()


def test_wait_async_does_not_block_the_loop():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=1)
    try:
        job = queue.submit(gate.work(7))

        async def main():
            ticks = 0
            waiter = asyncio.ensure_future(job.wait_async())
            while not waiter.done():
                ticks += 1
                if ticks == 5:
                    gate.release.set()
                await asyncio.sleep(0.01)
            return ticks, waiter.result()

        ticks, result = asyncio.run(main())
        assert result == 7 and ticks >= 5
    finally:
        queue.shutdown()


class FakeThermal:
    """Hands out the snapshot the test sets; ``looks`` counts who read it (see tests/helpers/waiting.py)."""

    def __init__(self) -> None:
        self.snap = ThermalSnapshot()
        self.looks = Looks()

    def snapshot(self) -> ThermalSnapshot:
        self.looks.record()
        return self.snap


def test_thermal_limits_concurrency_holds_and_refuses():
    gate = Gate()
    thermal = FakeThermal()
    thermal.snap = ThermalSnapshot(state="warm", temp_c=75.0, max_concurrency=1)
    queue = JobQueue(concurrency=2, max_waiting=4, thermal=thermal)
    try:
        jobs = [queue.submit(gate.work(i)) for i in range(3)]
        wait_for(lambda: queue.stats().running == 1)
        thermal.looks.reset()
        thermal.looks.wait_for_a_worker()  # the idle worker declined the second job
        assert queue.stats().running == 1 and queue.stats().limit == 1
        thermal.snap = ThermalSnapshot(state="critical", temp_c=95.0, refuse_new=True,
                                       message="95 °C")
        with pytest.raises(BusyError, match="too hot"):
            queue.submit(gate.work(9))
        thermal.snap = ThermalSnapshot(state="hot", temp_c=85.0, hold_new=True)
        gate.release.set()
        assert jobs[0].wait(5)
        thermal.looks.reset()
        thermal.looks.wait_for_a_worker()  # held: a worker looked while hot and started nothing
        assert not jobs[1].finished and queue.position(jobs[1]) == 1
        thermal.snap = ThermalSnapshot(state="normal", temp_c=50.0)
        assert all(j.wait(5) for j in jobs)
    finally:
        queue.shutdown()


def test_shutdown_cancels_waiting_jobs():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=2)
    running = queue.submit(gate.work(0))
    waiting = queue.submit(gate.work(1))
    wait_for(lambda: running.state is JobState.RUNNING)
    queue.shutdown(timeout=2)
    assert waiting.state is JobState.CANCELLED
    assert running.wait(2) and running.state is JobState.CANCELLED
    with pytest.raises(BusyError):
        queue.submit(gate.work(2))


def test_client_chosen_ids_must_be_unique_while_active():
    from cosyedge.errors import ParameterError

    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=2)
    try:
        job = queue.submit(gate.work(0), job_id="mine")
        with pytest.raises(ParameterError, match="already in use"):
            queue.submit(gate.work(1), job_id="mine")
        gate.release.set()
        assert job.wait(5)
        again = queue.submit(gate.work(2), job_id="mine")  # free again once finished
        assert again.wait(5) and queue.get("mine") is again
    finally:
        queue.shutdown()


def test_a_full_queue_while_hot_is_refused_for_the_heat_with_the_cooling_time():
    """While hot nothing starts: the waiting list only drains once the box has cooled, so the
    refusal names the heat and its Retry-After is the governor's cooling estimate, not the
    queue's guess from job durations."""
    thermal = FakeThermal()
    thermal.snap = ThermalSnapshot(state="hot", temp_c=84.0, max_concurrency=1, hold_new=True,
                                   message="cooling down (84 °C)", resume_in_s=90.0)
    queue = JobQueue(concurrency=2, max_waiting=2, thermal=thermal)
    try:
        held = [queue.submit(lambda job: None) for _ in range(2)]
        with pytest.raises(BusyError) as refused:
            queue.submit(lambda job: None)
        error = refused.value
        assert error.code == "cooling_down" and error.retry_after == 90
        assert "cooling down (84 °C)" in error.message and "about 90 s" in error.message
        assert (error.params["temp_c"], error.params["waiting"]) == (84.0, 2)
        assert not any(job.finished for job in held)
        thermal.snap = ThermalSnapshot(state="normal", temp_c=60.0)
        assert all(job.wait(5) for job in held)
    finally:
        queue.shutdown()


# --- Retry-After from the jobs ahead -------------------------------------------------------------


def _sleeper(seconds: float):
    def fn(job):
        time.sleep(seconds)
    return fn


def _half_done(gate: Gate):
    """Gated work that says it is one sentence of two through."""
    def fn(job):
        job.report(1, 2)
        return gate.work(0)(job)
    return fn


def test_retry_after_is_when_a_new_job_could_start_from_the_jobs_ahead():
    """Nothing measured yet: every job is DEFAULT_JOB_SECONDS (5 s); a running job half through
    has 2.5 s left. Two workers each 2.5 s from free and one 5 s job waiting: a new job could
    start in 2.5 s, so 3 (not the 5 x 3 / 2 of a mean times the queue)."""
    gate = Gate()
    queue = JobQueue(concurrency=2, max_waiting=1)
    try:
        running = [queue.submit(_half_done(gate), size=100) for _ in range(2)]
        wait_for(lambda: all(j.total_steps == 2 for j in running))
        queue.submit(gate.work(1), size=100)
        with pytest.raises(BusyError) as info:
            queue.submit(gate.work(2), size=100)
        assert info.value.retry_after == 3
    finally:
        gate.release.set()
        queue.shutdown()


def test_retry_after_follows_the_text_waiting_not_the_jobs_before():
    """The rate is learnt from finished readings (seconds per character); a long piece of other
    work (a voice encoded, 0.5 s) does not change it. Long texts waiting give a long Retry-After,
    short ones 1 s, with the same jobs finished before."""
    gate = Gate()
    queue = JobQueue(concurrency=2, max_waiting=2)
    try:
        learnt = [queue.submit(_sleeper(0.1), size=1000) for _ in range(3)]
        learnt.append(queue.submit(_sleeper(0.5)))  # reads no text
        assert all(j.wait(10) for j in learnt)
        running = [queue.submit(gate.work(i), size=1) for i in range(2)]
        wait_for(lambda: queue.stats().running == 2)
        long_texts = [queue.submit(gate.work(9), size=100_000) for _ in range(2)]
        with pytest.raises(BusyError) as long_wait:
            queue.submit(gate.work(3), size=10)
        # >= 1e-4 s per character: each waiting text >= 10 s; a new job starts once one has ended
        assert 10 <= long_wait.value.retry_after <= 60, long_wait.value.retry_after
        for job in long_texts:
            queue.cancel(job.id)
        [queue.submit(gate.work(4), size=100) for _ in range(2)]
        with pytest.raises(BusyError) as short_wait:
            queue.submit(gate.work(5), size=10)
        assert short_wait.value.retry_after == 1  # never below 1 s
        assert not any(j.finished for j in running)
    finally:
        gate.release.set()
        queue.shutdown()


def test_busy_answers_put_each_estimate_beside_the_wait_it_turned_out_to_be():
    gate = Gate()
    queue = JobQueue(concurrency=1, max_waiting=0)
    try:
        job = queue.submit(gate.work(0), size=50)
        wait_for(lambda: queue.stats().running == 1)
        with pytest.raises(BusyError) as info:
            queue.submit(gate.work(1), size=50)
        (answer,) = queue.busy_answers()
        assert answer.retry_after == info.value.retry_after and answer.estimate_s > 0
        assert answer.actual_s is None  # the job ahead still runs
        time.sleep(0.2)
        gate.release.set()
        assert job.wait(5)
        (answer,) = queue.busy_answers()
        assert answer.actual_s is not None and answer.actual_s >= 0.2
    finally:
        gate.release.set()
        queue.shutdown()
