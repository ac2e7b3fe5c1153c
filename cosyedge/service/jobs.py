"""The one job queue: the only place that decides how many syntheses run at once.

UI and REST both submit here. At most ``concurrency`` jobs run (fewer when the thermal governor says
so); up to ``max_waiting`` more wait in FIFO order; beyond that :class:`BusyError` is raised at
once. Jobs run in named worker threads, so no event loop ever blocks on synthesis. Each job carries a
cancel flag (checked by the engine between sentences), per-sentence progress, and a done event that
both threads (``wait``) and coroutines (``wait_async``) can await. A streaming job also carries an
:class:`~cosyedge.service.streaming.AudioStream` that its work function fills; the job closes it when it ends,
however it ends (done, failed, cancelled while waiting or running, shut down), so readers never hang.

A full queue's ``Retry-After`` comes from the jobs ahead themselves: each job's size (the characters
it reads) times the engine's measured rate (the median seconds per character of the recent finished
readings), or for work that reads no text (hearing a prompt) the median of such jobs; the running
ones count what is left of theirs. Laid out on the workers in queue order, they give the time until
a new job could start; :meth:`JobQueue.busy_answers` keeps each estimate beside the wait it turned
out to be, for ``bench/load.py``.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import math
import statistics
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from cosyedge.errors import BusyError, CancelledError, CosyedgeError, EngineError, ParameterError
from cosyedge.service.streaming import AudioStream
from cosyedge.host.thermal import ThermalSnapshot

logger = logging.getLogger(__name__)

#: A running job's phase until its work function sets its own.
PHASE_STARTING = "starting"

#: How often idle workers re-read the thermal snapshot (a hot box may cool down with no new event).
THERMAL_POLL_S = 1.0
#: A job's expected seconds before any job like it has finished (Retry-After's first guess).
DEFAULT_JOB_SECONDS = 5.0
#: How many finished jobs of each kind (readings, other work) the rate is measured over.
RATE_WINDOW = 20
#: How many refusals ``busy_answers`` remembers.
KEEP_BUSY_ANSWERS = 256
#: Finished jobs stay findable (state, progress) for this many later finishes...
KEEP_FINISHED = 200
#: ...but only the newest few keep their result (the audio): their waiters have long collected it.
KEEP_RESULTS = 8


class ThermalSource(Protocol):
    """Anything with ``snapshot()``; the operations engineer's ThermalGovernor is one."""

    def snapshot(self) -> ThermalSnapshot: ...


class JobState(str, enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class Job:
    """One unit of work and everything a client may ask about it while it waits or runs.

    The work function receives the job itself, so it can report progress and phase and check
    :meth:`is_cancelled`.
    """

    def __init__(self, fn: Callable[["Job"], Any], job_id: str, owner: str | None,
                 stream: AudioStream | None = None, size: int | None = None) -> None:
        self.id = job_id
        self.owner = owner
        self.stream = stream
        #: Characters of text the job reads (None: work that reads none, e.g. hearing a prompt).
        self.size = size
        self._fn = fn
        self.state = JobState.WAITING
        self.phase = "waiting"
        self.done_steps = 0
        self.total_steps = 0
        self.result: Any = None
        self.error: BaseException | None = None
        self._result_released = False
        self.submitted_at = time.monotonic()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Job], None]] = []
        self._release: Callable[[Job], None] | None = None

    # --- called by the work function -------------------------------------------------------
    def report(self, done: int, total: int) -> None:
        """Per-sentence progress: ``done`` of ``total`` sentences finished."""
        self.done_steps, self.total_steps = done, total

    def set_phase(self, phase: str) -> None:
        """A short word for the UI: "loading model…", "synthesizing", ..."""
        self.phase = phase

    def is_cancelled(self) -> bool:
        return self._cancel.is_set()

    # --- called by clients -----------------------------------------------------------------
    def cancel(self) -> bool:
        """Ask the job to stop; returns False when it had already finished. A waiting job keeps
        its place in the queue until a worker drops it: clients cancel through
        :meth:`JobQueue.cancel`, which removes it at once."""
        if self.finished:
            return False
        self._cancel.set()
        return True

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the job finishes (True) or the timeout passes (False)."""
        return self._done.wait(timeout)

    def outcome(self) -> Any:
        """The result of a finished job, or its error raised again."""
        if not self.finished:
            raise RuntimeError(f"job {self.id} has not finished")
        if self.error is not None:
            raise self.error
        if self._result_released:
            raise RuntimeError(f"job {self.id} finished long ago; its result has been released")
        return self.result

    def release_result(self) -> None:
        """Drop the (large) result of a finished job; its state stays queryable."""
        if self.finished and self.error is None:
            self._result_released = True
            self.result = None
        if self.finished and self.stream is not None:
            self.stream.release()

    def add_done_callback(self, callback: Callable[["Job"], None]) -> None:
        """Run ``callback(job)`` once it finishes (at once if it already has), in the finishing thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    async def wait_async(self) -> Any:
        """Await the outcome from a coroutine without blocking its event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Any, BaseException | None]] = loop.create_future()

        def wake(job: Job) -> None:
            # Taken in the finishing thread, before the queue may release the result.
            try:
                taken: tuple[Any, BaseException | None] = (job.outcome(), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                taken = (None, exc)
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(taken))

        self.add_done_callback(wake)
        result, error = await future
        if error is not None:
            raise error
        return result

    # --- called by the queue ---------------------------------------------------------------
    def _run(self, release: Callable[["Job"], None] | None = None) -> None:
        """Run the work function. ``release`` (the queue's bookkeeping) runs once the job has ended
        and before anyone waiting on it wakes, so a woken waiter never still counts it as running."""
        self._release = release
        self.state = JobState.RUNNING
        self.started_at = time.monotonic()
        self.phase = PHASE_STARTING
        try:
            if self._cancel.is_set():
                raise CancelledError("cancelled before it started")
            self.result = self._fn(self)
            self._finish(JobState.DONE)
        except CancelledError as exc:
            self.error = exc
            self._finish(JobState.CANCELLED)
        except CosyedgeError as exc:
            self.error = exc
            self._finish(JobState.FAILED)
        except Exception as exc:  # a bug or a broken model: keep the type out of the client's face
            logger.exception("job %s failed", self.id)
            self.error = EngineError(f"synthesis failed: {type(exc).__name__}: {exc}", code="job_failed",
                                     error=type(exc).__name__)
            self.error.__cause__ = exc
            self._finish(JobState.FAILED)

    def _finish(self, state: JobState, error: BaseException | None = None) -> None:
        if error is not None:
            self.error = error
        self.state = state
        self.phase = state.value
        self.finished_at = time.monotonic()
        if self.stream is not None:
            self.stream.close(self.error)
        release, self._release = self._release, None
        if release is not None:
            release(self)
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                logger.exception("done-callback of job %s failed", self.id)


@dataclass(frozen=True)
class BusyAnswer:
    """One ``queue_full`` refusal: the Retry-After it gave and, once the jobs ahead of it have let
    a new job start, the wait that turned out to be (None until then, or when they are forgotten)."""

    retry_after: int
    estimate_s: float
    actual_s: float | None


@dataclass(frozen=True)
class QueueStats:
    """A consistent picture of the queue for /health and the status line."""

    running: int
    waiting: int
    concurrency: int  # configured
    limit: int  # in force now (thermal may lower it)
    max_waiting: int
    held: bool  # thermal "hot": new jobs wait
    idle_seconds: float  # time since the queue last became empty (0 while busy)


class JobQueue:
    """Bounded FIFO queue with ``concurrency`` worker threads.

    ``thermal`` (optional) is read before each start: ``refuse_new`` turns submissions away,
    ``hold_new`` keeps waiting jobs waiting, ``max_concurrency`` lowers the limit.
    """

    def __init__(self, concurrency: int = 2, max_waiting: int = 8,
                 thermal: ThermalSource | None = None, name: str = "cosyedge-job") -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        self.concurrency = concurrency
        self.max_waiting = max_waiting
        self.thermal = thermal
        self._name = name
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: dict[str, Job] = {}
        self._jobs: dict[str, Job] = {}  # waiting + running + recently finished
        self._recent: deque[str] = deque()
        self._rates: deque[float] = deque(maxlen=RATE_WINDOW)  # seconds per character, readings
        self._other_seconds: deque[float] = deque(maxlen=RATE_WINDOW)  # jobs that read no text
        # (when, limit, estimate, Retry-After, ids of the jobs ahead) per queue_full refusal
        self._busy: deque[tuple[float, int, float, int, tuple[str, ...]]] = deque(maxlen=KEEP_BUSY_ANSWERS)
        self._workers: list[threading.Thread] = []
        self._stopping = False
        self._idle_since: float | None = time.monotonic()  # None while jobs run or wait
        self._counter = itertools.count(1)

    # --- thermal --------------------------------------------------------------------------
    def thermal_snapshot(self) -> ThermalSnapshot:
        """The governor's snapshot, or "no limits" when there is none or it fails."""
        if self.thermal is None:
            return ThermalSnapshot()
        try:
            return self.thermal.snapshot()
        except Exception:  # a broken sensor must not stop the service
            logger.exception("thermal snapshot failed; not throttling")
            return ThermalSnapshot(message="thermal sensor failed; not throttling")

    def _limit(self, snap: ThermalSnapshot) -> int:
        if snap.max_concurrency is None:
            return self.concurrency
        return max(1, min(self.concurrency, snap.max_concurrency))

    # --- submitting -----------------------------------------------------------------------
    def submit(self, fn: Callable[[Job], Any], *, owner: str | None = None,
               job_id: str | None = None, stream: AudioStream | None = None, cancelled: bool = False,
               size: int | None = None) -> Job:
        """Queue ``fn(job)``; raise :class:`BusyError` (with retry_after) when there is no room.

        ``stream``: the job's audio stream (filled by ``fn``, closed when the job ends).
        ``size``: the characters of text the job reads (None for work that reads none); what the
        queue's Retry-After is estimated from.
        ``cancelled``: its owner cancelled it before it could be queued (while the request was being
        checked): the job is recorded, finished as cancelled, and never reaches a worker."""
        snap = self.thermal_snapshot()
        with self._cond:
            if self._stopping:
                raise BusyError("the server is shutting down", retry_after=30, code="shutting_down")
            if snap.refuse_new:
                raise BusyError(f"the box is too hot to start new work ({snap.message}); "
                                "try again when it has cooled", retry_after=snap.retry_after(),
                                code="too_hot", thermal=snap.message, temp_c=snap.temp_c)
            # Jobs just queued for a free slot sit in the waiting list for an instant; count the slots.
            free_slots = 0 if snap.hold_new else max(0, self._limit(snap) - len(self._running))
            if len(self._waiting) >= self.max_waiting + free_slots:
                running, waiting = len(self._running), len(self._waiting)
                if snap.hold_new:  # nothing starts before the box cools: the wait is the cooling's
                    heat = f"{snap.temp_c:.0f} °C" if snap.temp_c is not None else snap.message
                    raise BusyError(f"the box is cooling down ({heat}): no job starts until it has "
                                    f"cooled, and {waiting} already wait, the most this server holds; "
                                    f"try again in about {snap.retry_after()} s",
                                    retry_after=snap.retry_after(), code="cooling_down",
                                    temp_c=snap.temp_c, running=running, waiting=waiting)
                # counted as they are: a job just queued for a free slot waits an instant, so the
                # waiting count can pass max_waiting while the whole stays within its limit
                retry_after = self._retry_after_locked(self._limit(snap))
                raise BusyError(f"busy: {running} job{'s' if running != 1 else ''} running and {waiting} "
                                f"waiting, the most this server takes at once; try again shortly",
                                retry_after=retry_after, code="queue_full",
                                running=running, waiting=waiting)
            job_id = job_id or uuid.uuid4().hex[:16]
            if job_id in self._jobs and not self._jobs[job_id].finished:
                raise ParameterError(f"job id {job_id!r} is already in use by a waiting or running job",
                                     code="job_id_in_use", job_id=job_id)
            job = Job(fn, job_id, owner, stream, size)
            self._jobs[job_id] = job
            if cancelled:
                job.cancel()
                self._remember_locked(job)
            else:
                self._waiting.append(job)
                self._idle_since = None
                self._ensure_workers_locked()
                self._cond.notify_all()
        if cancelled:
            job._finish(JobState.CANCELLED, CancelledError("cancelled before it was queued"))
            logger.debug("job %s cancelled before it was queued (owner %s)", job_id, owner)
            return job
        logger.debug("job %s queued (owner %s)", job_id, owner)
        return job

    def _ensure_workers_locked(self) -> None:
        while len(self._workers) < self.concurrency:
            worker = threading.Thread(target=self._work, daemon=True,
                                      name=f"{self._name}-{next(self._counter)}")
            self._workers.append(worker)
            worker.start()

    def _expected_seconds_locked(self, job: Job) -> float:
        """How long ``job`` should take, from what jobs like it took lately."""
        if job.size is not None and self._rates:
            return statistics.median(self._rates) * max(1, job.size)
        if job.size is None and self._other_seconds:
            return statistics.median(self._other_seconds)
        return DEFAULT_JOB_SECONDS

    def _start_estimate_locked(self, limit: int) -> float:
        """Seconds until a job queued now could start: what is left of the running jobs, then the
        waiting ones in order, each on the first of ``limit`` workers to come free."""
        now = time.monotonic()
        free_at = []
        for job in self._running.values():
            expected = self._expected_seconds_locked(job)
            if job.total_steps:  # it says how far it is: trust that over the clock
                left = expected * (1 - min(job.done_steps, job.total_steps) / job.total_steps)
            else:
                left = expected - (now - (job.started_at or now))
            free_at.append(max(0.0, left))
        free_at = sorted(free_at)[-limit:] if len(free_at) > limit else free_at
        free_at += [0.0] * (limit - len(free_at))
        heapq.heapify(free_at)
        for job in self._waiting:
            heapq.heappush(free_at, heapq.heappop(free_at) + self._expected_seconds_locked(job))
        return free_at[0]

    def _retry_after_locked(self, limit: int) -> int:
        """Retry-After of a full queue: when a new job could start, in whole seconds, at least 1."""
        estimate = self._start_estimate_locked(limit)
        retry_after = max(1, math.ceil(estimate))
        ahead = tuple(job.id for job in (*self._running.values(), *self._waiting))
        self._busy.append((time.monotonic(), limit, estimate, retry_after, ahead))
        return retry_after

    def busy_answers(self) -> list[BusyAnswer]:
        """The recent ``queue_full`` refusals, oldest first: the Retry-After each gave, and the wait it
        turned out to be (until all but ``limit - 1`` of the jobs then ahead had finished)."""
        with self._cond:
            answers = []
            for at, limit, estimate, retry_after, ahead in self._busy:
                need = len(ahead) - limit + 1  # how many of them must end before a new job starts
                jobs = [self._jobs.get(i) for i in ahead]
                done = sorted(j.finished_at or 0.0 for j in jobs if j is not None and j.finished)
                actual: float | None = None
                if need <= 0:
                    actual = 0.0
                elif None not in jobs and len(done) >= need:  # (a forgotten job's end is unknown)
                    actual = max(0.0, done[need - 1] - at)
                answers.append(BusyAnswer(retry_after, estimate, actual))
            return answers

    # --- workers --------------------------------------------------------------------------
    def _next_job(self) -> Job | None:
        """Block until a job may start (or the queue stops); drop jobs cancelled while waiting."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                snap = self.thermal_snapshot() if self.thermal is not None else ThermalSnapshot()
                if self._waiting and not snap.hold_new and len(self._running) < self._limit(snap):
                    job = self._waiting.popleft()
                    self._running[job.id] = job
                    self._idle_since = None
                    return job
                self._cond.wait(THERMAL_POLL_S if self.thermal is not None else None)

    def _work(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            job._run(self._release_ended)

    def _release_ended(self, job: Job) -> None:
        """A started job has ended: free its slot, remember it, wake the workers."""
        with self._cond:
            self._running.pop(job.id, None)
            if job.started_at is not None and job.state is JobState.DONE:
                seconds = time.monotonic() - job.started_at
                if job.size is None:
                    self._other_seconds.append(seconds)
                else:
                    self._rates.append(seconds / max(1, job.size))
            self._remember_locked(job)
            if not self._running and not self._waiting:
                self._idle_since = time.monotonic()
            self._cond.notify_all()

    def _remember_locked(self, job: Job, keep: int = KEEP_FINISHED) -> None:
        """Keep finished jobs findable for a while (a client may ask after the fact).

        Only the newest ``KEEP_RESULTS`` keep their audio; otherwise 200 long texts would hold
        gigabytes of finished audio that no client will ever collect again.
        """
        self._recent.append(job.id)
        if len(self._recent) > KEEP_RESULTS:
            older = self._jobs.get(self._recent[-KEEP_RESULTS - 1])
            if older is not None:
                older.release_result()
        while len(self._recent) > keep:
            old = self._recent.popleft()
            if old in self._jobs and self._jobs[old].finished:
                del self._jobs[old]

    # --- asking and cancelling ------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self._cond:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> bool:
        """Cancel a waiting job at once or flag a running one; False when unknown or finished."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.finished:
                return False
            job.cancel()
            if job in self._waiting:
                self._waiting.remove(job)
                self._remember_locked(job)
                if not self._running and not self._waiting:
                    self._idle_since = time.monotonic()
                self._cond.notify_all()
            else:
                return True
        job._finish(JobState.CANCELLED, CancelledError("cancelled while waiting"))
        return True

    def cancel_owner(self, owner: str) -> int:
        """Cancel every unfinished job of one owner (a UI session); returns how many."""
        with self._cond:
            ids = [j.id for j in (*self._waiting, *self._running.values()) if j.owner == owner]
        return sum(self.cancel(job_id) for job_id in ids)

    def position(self, job: Job) -> int | None:
        """1-based place in the waiting list, or None when not waiting."""
        with self._cond:
            for index, waiting in enumerate(self._waiting, start=1):
                if waiting is job:
                    return index
        return None

    def jobs_of(self, owner: str) -> list[Job]:
        """Unfinished jobs of one owner, running first."""
        with self._cond:
            return [j for j in (*self._running.values(), *self._waiting) if j.owner == owner]

    def active_jobs(self) -> list[Job]:
        """Running then waiting jobs, in order."""
        with self._cond:
            return [*self._running.values(), *self._waiting]

    def stats(self) -> QueueStats:
        snap = self.thermal_snapshot()
        with self._cond:
            idle = 0.0 if self._idle_since is None else time.monotonic() - self._idle_since
            return QueueStats(running=len(self._running), waiting=len(self._waiting),
                              concurrency=self.concurrency, limit=self._limit(snap),
                              max_waiting=self.max_waiting, held=snap.hold_new,
                              idle_seconds=idle)

    def shutdown(self, cancel_running: bool = True, timeout: float = 5.0) -> None:
        """Stop the workers; waiting jobs are cancelled, running ones flagged and awaited briefly."""
        with self._cond:
            self._stopping = True
            waiting = list(self._waiting)
            self._waiting.clear()
            running = list(self._running.values())
            self._cond.notify_all()
        for job in waiting:
            job.cancel()
            job._finish(JobState.CANCELLED, CancelledError("the server is shutting down",
                                                           code="cancelled_on_shutdown"))
        if cancel_running:
            for job in running:
                job.cancel()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
