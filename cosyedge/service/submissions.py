"""Requests between their check and the queue. A request is checked (its prompt decoded: up to a
second) before it is queued; a cancel of its owner that lands in that moment must still cancel it.
:class:`Submissions` keeps one flag per request being checked, per owner, and queues the request
already cancelled when its flag was set; the model switch waits for none to be in flight.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from cosyedge.service.jobs import Job, JobQueue
from cosyedge.service.requests import PreparedRequest


class Submissions:
    """The requests of each owner being checked for ``queue``. ``lock`` (reentrant) is held while a
    checked request is queued and while an owner is cancelled, so either sees the other whole."""

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue
        self.lock = threading.RLock()
        self._pending: dict[str, set[threading.Event]] = {}

    def queue_checked(self, check: Callable[[], PreparedRequest], owner: str | None,
                      work: Callable[[PreparedRequest], Callable[[Job], Any]], **queue_args: Any) -> Job:
        """Run ``check`` (the service's ``prepare``), then queue ``work(prepared)``; a cancel of
        ``owner`` that comes while the request is checked cancels the job (queued already cancelled).
        The job's size (what the queue's Retry-After is estimated from) is its text's length unless
        ``queue_args`` says otherwise (a lesson's is the whole lesson)."""
        cancelled = threading.Event()
        if owner is not None:
            with self.lock:
                self._pending.setdefault(owner, set()).add(cancelled)
        try:
            prepared = check()
        except BaseException:
            self._done(owner, cancelled)
            raise
        # Queued under the same lock as cancel_owner: a cancel counts this request either as
        # being checked (its flag: the job is then made already cancelled, so no worker can start
        # it in between) or as a queued job, never both.
        with self.lock:
            try:
                return self.queue.submit(work(prepared), owner=owner, cancelled=cancelled.is_set(),
                                         **{"size": len(prepared.request.text), **queue_args})
            finally:
                self._done(owner, cancelled)

    def _done(self, owner: str | None, flag: threading.Event) -> None:
        """Drop a submission's cancel flag (the lock is reentrant: called with or without it)."""
        if owner is None:
            return
        with self.lock:
            pending = self._pending[owner]
            pending.discard(flag)
            if not pending:
                del self._pending[owner]

    def cancel_owner(self, owner: str) -> int:
        """Cancel an owner's jobs, queued or running, and the ones it is submitting right now
        (their check runs before they are queued); returns how many."""
        with self.lock:
            pending = list(self._pending.get(owner, ()))
            for flag in pending:
                flag.set()
            return self.queue.cancel_owner(owner) + len(pending)

    def owners(self) -> set[str]:
        """The owners with a request being checked now."""
        with self.lock:
            return set(self._pending)
