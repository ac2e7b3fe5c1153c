"""Kokoro model calls in flight: an engine-wide run limit, and an in-order pipeline over it.

Why: one onnxruntime call at 2 intra-op threads leaves the second core half idle (about half of
the vocoder's time is single-threaded elementwise work), so two calls at once make more audio per
second than one (docs/bench-log/kokoro.md, "Two sentences in flight"). The engine starts the next
sentence's call while the current one runs and still hands the chunks out strictly in order.

:class:`RunSlots` belongs to the engine, so its limit holds across jobs: one job alone gets every
slot, two jobs share them. The call whose chunk a job hands out next is *urgent* and is served
before any look-ahead call; a look-ahead call also waits while the work already running plus its
own exceeds a budget (the vocoder's activation memory grows with the audio length), unless nothing
runs at all. Urgent calls ignore the budget, so a job's next call is never held back by it.

:func:`in_order` runs a list of calls with up to ``depth`` of them in flight; :class:`Overlap`
says when a look-ahead call may start (not next to the first call, whose chunk a listener waits
for; only while the audio already handed out covers the next chunk). Cancellation stops
new calls from being launched; on every way out (cancel, error, the consumer closing the
generator) the calls that have not started are dropped and the running ones are waited for, so no
model run is left behind unnoticed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from cosyedge.engines.base import AudioChunk, CancelFn
from cosyedge.errors import CancelledError, EngineError

logger = logging.getLogger(__name__)


class Abandoned(Exception):
    """A call given up before it started (its pipeline was cancelled, failed or closed)."""


@dataclass(eq=False)
class Ticket:
    """One model call's place in line: its cost (phonemes / speed, a proxy for audio length and
    activation memory) and whether its chunk is the next one its job hands out."""

    cost: float
    urgent: bool = False
    abandoned: bool = False


class RunSlots:
    """At most ``slots`` model runs at once across the whole engine (see the module docstring)."""

    def __init__(self, slots: int, budget: float) -> None:
        if slots < 1:
            raise EngineError(f"model runs at once must be at least 1, not {slots}")
        self.slots = slots
        self.budget = budget
        self._cond = threading.Condition()
        self._waiting: list[Ticket] = []
        self._running = 0
        self._cost = 0.0
        self.peak = 0  # most runs at once so far (for tests and benches)

    @property
    def running(self) -> int:
        with self._cond:
            return self._running

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now (abandoned ones included until they give up)."""
        with self._cond:
            return len(self._waiting)

    @contextmanager
    def hold(self, ticket: Ticket) -> Iterator[None]:
        """Wait for a slot, hold it for the block; raises :class:`Abandoned` if given up first."""
        self._acquire(ticket)
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cost -= ticket.cost
                self._cond.notify_all()

    def promote(self, ticket: Ticket) -> None:
        """Mark a waiting or running call urgent: its chunk is the next its job hands out."""
        with self._cond:
            ticket.urgent = True
            self._cond.notify_all()

    def abandon(self, ticket: Ticket) -> None:
        """Give up a call; if it is still waiting it raises :class:`Abandoned` instead of running."""
        with self._cond:
            ticket.abandoned = True
            self._cond.notify_all()

    def _acquire(self, ticket: Ticket) -> None:
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not self._may_start(ticket):
                    if ticket.abandoned:
                        raise Abandoned()
                    self._cond.wait()
            finally:
                self._waiting.remove(ticket)
            self._running += 1
            self._cost += ticket.cost
            self.peak = max(self.peak, self._running)
            self._cond.notify_all()  # the next in line may be a different waiter now

    def _may_start(self, ticket: Ticket) -> bool:
        """First come, first served within each class; urgent calls before look-ahead ones."""
        if ticket.abandoned or self._running >= self.slots:
            return False
        live = [t for t in self._waiting if not t.abandoned]
        urgent = [t for t in live if t.urgent]
        if ticket.urgent:
            return urgent[0] is ticket
        if urgent:
            return False
        first = next(t for t in live if not t.urgent)
        return first is ticket and (self._running == 0 or self._cost + ticket.cost <= self.budget)


@dataclass(frozen=True)
class Overlap:
    """When a job may start a look-ahead call next to the call whose chunk it hands out next.

    ``first``: also next to the very first call (more audio per second overall, but the first
    chunk, the one a listener waits for, then shares the cores). ``guard``: after the first chunk,
    look ahead only while the audio already handed out leads a real-time player (started at the
    first chunk) by at least ``guard`` times the next chunk's expected time alone (its cost times
    the seconds per cost of the job's last call), so that slowing that chunk down cannot make the
    player wait; None: always look ahead after the first chunk.
    """

    first: bool = False
    guard: float | None = None


@dataclass(frozen=True)
class Call:
    """One model call for :func:`in_order`: its ticket cost and the work (run holding a slot)."""

    cost: float
    run: Callable[[], AudioChunk]


def in_order(calls: Sequence[Call], slots: RunSlots, depth: int, overlap: Overlap = Overlap(),
             cancelled: CancelFn | None = None,
             clock: Callable[[], float] = time.monotonic) -> Iterator[AudioChunk]:
    """Run ``calls`` with up to ``depth`` in flight; yield their chunks in order, each as soon as
    it and all before it are done. An error is raised where its chunk would have been yielded;
    ``cancelled()`` is checked before each chunk (raising :class:`CancelledError`) and before each
    launch."""
    total = len(calls)
    depth = max(1, depth)
    pending: deque[tuple[Ticket, Future]] = deque()
    launched = 0
    handed_s = 0.0
    first_at: float | None = None
    seconds_per_cost = 0.0  # of the last call handed out (its own run time, waiting excluded)
    is_cancelled = cancelled or (lambda: False)

    def may_look_ahead() -> bool:
        if first_at is None:
            return overlap.first
        if overlap.guard is None:
            return True
        lead = handed_s - (clock() - first_at)
        head_cost = pending[0][0].cost
        return lead >= overlap.guard * seconds_per_cost * head_cost

    def launch() -> None:
        nonlocal launched
        ticket = Ticket(cost=calls[launched].cost, urgent=not pending)
        pending.append((ticket, executor.submit(_run, slots, ticket, calls[launched].run)))
        launched += 1

    def fill() -> None:
        while launched < total and len(pending) < depth:
            if pending and not may_look_ahead():
                return
            if is_cancelled():
                return
            launch()

    executor = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="kokoro-call")
    try:
        for index in range(total):
            if is_cancelled():
                raise CancelledError(f"cancelled after {index} of {total} sentences")
            if not pending:
                launch()
            fill()
            ticket, future = pending[0]
            slots.promote(ticket)
            chunk, seconds = future.result()
            pending.popleft()
            seconds_per_cost = seconds / ticket.cost if ticket.cost > 0 else 0.0
            if first_at is None:
                first_at = clock()
            handed_s += chunk.audio.size / chunk.sample_rate
            fill()  # start the next call before handing this chunk out
            yield chunk
    finally:
        for ticket, _ in pending:
            slots.abandon(ticket)
        executor.shutdown(wait=True)
        if pending:
            logger.debug("pipeline closed with %d calls in flight or queued; waited for the running ones",
                         len(pending))


def _run(slots: RunSlots, ticket: Ticket, work: Callable[[], AudioChunk]) -> tuple[AudioChunk, float]:
    """``work()`` holding a slot; its chunk and its run time (slot waiting excluded)."""
    with slots.hold(ticket):
        start = time.perf_counter()
        chunk = work()
        return chunk, time.perf_counter() - start
