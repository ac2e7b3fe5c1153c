"""Waiting on observable state instead of sleeping: a deadline poll, and a count of who looked.

Race tests order their steps by what the code under test does (a state reached, a sensor read),
never by a fixed sleep, so they neither flake on a busy box nor wait longer than needed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 10 ms until it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        time.sleep(0.01)


class Looks:
    """Counts reads per thread (call :meth:`record` from a fake sensor or snapshot source).

    A job-queue worker reads the thermal snapshot under the queue's lock and decides (start a job,
    or wait) before it lets go of the lock. So once a worker has looked since :meth:`reset`, any
    query of the queue (``stats()``, ``position()``: they take the same lock) sees a decision made
    under the snapshot the test set before the reset.
    """

    def __init__(self, thread_prefix: str = "cosyedge-job") -> None:
        self.thread_prefix = thread_prefix
        self._cond = threading.Condition()
        self._counts: Counter[str] = Counter()

    def record(self) -> None:
        with self._cond:
            self._counts[threading.current_thread().name] += 1
            self._cond.notify_all()

    def reset(self) -> None:
        with self._cond:
            self._counts.clear()

    def wait_for_a_worker(self, timeout: float = 10.0) -> None:
        """Block until a queue worker thread has looked since :meth:`reset` (AssertionError after ``timeout``)."""
        def looked() -> bool:
            return any(name.startswith(self.thread_prefix) for name in self._counts)

        with self._cond:
            if not self._cond.wait_for(looked, timeout):
                raise AssertionError(f"no queue worker looked within {timeout:g} s")
