"""The speed-mode check as low-priority work of the service: :class:`ModeCheckRunner`.

One check at a time, on its own thread, outside the job queue's slots, on the served model only:

* it **yields**: before every render and score it waits while any user job runs or waits or a
  request is being checked (:class:`YieldingGate`), and a render under way when a user's job comes is
  stopped at the engine's next cancel point and done again later (same seed); a user's job so waits
  at most for the rest of one check sentence;
* it can be **cancelled** (``cancel``), and the model switch cancels it (``stop``, before the
  engine is released); a cancelled or failed check writes nothing, so the previous ``modes.json``
  stays whole; a finished one is written atomically (:mod:`cosyedge.catalog.mode_verdicts`);
* with ``Settings.auto_mode_check`` (``COSYEDGE_AUTO_MODE_CHECK``, on by default) it **starts by
  itself** on a model with speed modes and preset speakers whose record is missing or stale (a
  model just imported, or reconverted), once the queue has been idle ``AUTO_IDLE_S``; at most once
  per model identity per process (a cancelled or failed automatic check is not retried by itself).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cosyedge.catalog.abilities import QUALITY_ENGINES
from cosyedge.catalog.manifest import read_identity, read_manifest
from cosyedge.catalog.mode_verdicts import identity_key, read_record, write_record
from cosyedge.config import Settings
from cosyedge.engines.base import Engine, VoicePrompt
from cosyedge.errors import CancelledError, ConflictError, CosyedgeError, InputError
from cosyedge.service.engine_holder import EngineHolder
from cosyedge.service.jobs import JobQueue
from cosyedge.service.mode_check import CheckProgress, CheckVoice, judge_of, run_check
from cosyedge.service.submissions import Submissions

logger = logging.getLogger(__name__)

#: How long the queue must have been idle before an automatic check starts.
AUTO_IDLE_S = 60.0
#: How often the yielding gate and the automatic start look at the queue.
POLL_S = 0.2

#: (engine, voice id or None) -> (the voice the engine takes, how the record names it).
VoiceResolver = Callable[[Engine, str | None], tuple[str | VoicePrompt, CheckVoice]]


class YieldingGate:
    """Lets the check go on only while no user job runs or waits, no request is being checked and the
    thermal governor lets new work start."""

    def __init__(self, queue: JobQueue, submissions: Submissions, cancelled: threading.Event,
                 yielding: threading.Event | None = None) -> None:
        self.queue = queue
        self.submissions = submissions
        self.cancelled = cancelled
        #: Set while the check waits for the box (a user's job runs or waits), cleared when it goes on.
        self.yielding = yielding or threading.Event()

    def busy(self) -> bool:
        """A user's job runs or waits, a request is being checked, or the box is too hot to start work."""
        if self.queue.active_jobs() or self.submissions.owners():
            return True
        heat = self.queue.thermal_snapshot()
        return bool(heat.hold_new or heat.refuse_new)

    def wait(self) -> None:
        while True:
            if self.cancelled.is_set():
                self.yielding.clear()
                raise CancelledError("the speed-mode check was cancelled")
            if not self.busy():
                self.yielding.clear()
                return
            self.yielding.set()
            self.cancelled.wait(POLL_S)

    def interrupted(self) -> bool:
        return self.cancelled.is_set() or self.busy()


@dataclass
class CheckStatus:
    """A check's state for the page and REST: ``state`` is idle, running, done, failed or cancelled."""

    model: str
    state: str = "idle"
    voice: dict[str, str] | None = None
    progress: CheckProgress = field(default_factory=CheckProgress)
    started: float | None = None
    finished: float | None = None
    automatic: bool = False
    error: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        seconds = None
        if self.started is not None:
            seconds = round((self.finished or time.time()) - self.started, 1)
        return {"model": self.model, "state": self.state, "voice": self.voice, "automatic": self.automatic,
                "progress": self.progress.as_dict(), "seconds": seconds, "error": self.error}


class ModeCheckRunner:
    """Starts, yields, cancels and stores the speed-mode check of the served model."""

    def __init__(self, settings: Callable[[], Settings], holder: EngineHolder, queue: JobQueue,
                 submissions: Submissions, resolve_voice: VoiceResolver,
                 hear: Callable[..., Any] | None) -> None:
        self._settings = settings
        self.holder = holder
        self.queue = queue
        self.submissions = submissions
        self._resolve_voice = resolve_voice
        self._hear = hear
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._status: dict[str, CheckStatus] = {}
        self._current: CheckStatus | None = None  # the last check started
        self._tried: set[str] = set()  # model identities an automatic check has been started for
        self._stop_watch = threading.Event()
        self._watch: threading.Thread | None = None
        #: Set while a running check waits for users' jobs (for the page's status and the tests).
        self.yielding = threading.Event()
        #: Lines per language of the set a check renders (None: all of them; fewer: a shorter check)
        #: and its languages (None: every one the model speaks).
        self.per_language: int | None = None
        self.languages: tuple[str, ...] | None = None

    # --- asking ---------------------------------------------------------------------------
    def status(self, model_id: str) -> CheckStatus:
        with self._lock:
            return self._status.get(model_id) or CheckStatus(model_id)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    # --- starting -------------------------------------------------------------------------
    def start(self, model_id: str, voice_id: str | None = None, automatic: bool = False) -> CheckStatus:
        """Start checking ``model_id`` (the served model) with a preset or saved voice (None: the
        model's first preset). ConflictError when it is not served or another check runs; an
        InputError when the model has no modes, or no preset and no voice was given."""
        settings = self._settings()
        if model_id != settings.model:
            raise ConflictError(f"model {model_id!r} is not the one served ({settings.model!r}): switch to it "
                                "first, or run `python -m cosyedge models check` with the app stopped",
                                code="mode_check_not_served", model=model_id, current=settings.model)
        model_dir = settings.model_path
        engine_name = read_identity(model_dir, "convert the model again").engine
        if engine_name not in QUALITY_ENGINES:
            raise InputError(f"model {model_id!r} ({engine_name}) has no speed modes to check",
                             code="mode_check_no_modes", engine=engine_name)
        if voice_id is None and not model_has_presets(model_dir):
            raise InputError(f"model {model_id!r} has no preset speakers: pick a saved voice to check its speed "
                             "modes with", code="mode_check_needs_voice", model=model_id)
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                running = self._current.model if self._current is not None else model_id
                raise ConflictError(f"a speed-mode check of {running!r} is already running",
                                    code="mode_check_running", model=running)
            self._cancel = threading.Event()
            status = CheckStatus(model_id, state="running", started=time.time(), automatic=automatic)
            self._status[model_id] = self._current = status
            self._thread = threading.Thread(target=self._run, args=(status, voice_id, self._cancel),
                                            name="cosyedge-mode-check", daemon=True)
            self._thread.start()
        logger.info("speed-mode check of %s started (%s)", model_id, "automatic" if automatic else "asked")
        return status

    def _run(self, status: CheckStatus, voice_id: str | None, cancel: threading.Event) -> None:
        gate = YieldingGate(self.queue, self.submissions, cancel, self.yielding)
        settings = self._settings()
        try:
            gate.wait()
            with self.holder.use() as engine:
                voice, check_voice = self._resolve_voice(engine, voice_id)
                status.voice = check_voice.as_dict()
                record = run_check(engine, voice, check_voice, judge=judge_of(engine), hear=self._hear,
                                   gate=gate, progress=status.progress, per_language=self.per_language,
                                   languages=self.languages)
            if cancel.is_set():  # a cancel that came with the last score still leaves the previous record
                raise CancelledError("the speed-mode check was cancelled")
            write_record(settings.models_path / status.model, record)
            status.state = "done"
        except CancelledError as exc:
            status.state = "cancelled"
            status.error = {"code": exc.code, "message": exc.message}
        except CosyedgeError as exc:
            status.state = "failed"
            status.error = {"code": exc.code, "message": exc.message}
        except Exception as exc:  # a broken model must not take the service down
            logger.exception("speed-mode check of %s failed", status.model)
            status.state = "failed"
            status.error = {"code": "mode_check_failed", "message": f"{type(exc).__name__}: {exc}"}
        finally:
            status.finished = time.time()
            logger.info("speed-mode check of %s: %s", status.model, status.state)

    # --- stopping -------------------------------------------------------------------------
    def cancel(self, model_id: str | None = None) -> bool:
        """Cancel the running check (of ``model_id`` when given); True when one was running."""
        with self._lock:
            thread = self._thread
            running = thread is not None and thread.is_alive()
            if not running or (model_id is not None and self._status.get(model_id, CheckStatus("")).state != "running"):
                return False
            self._cancel.set()
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the running check and wait for it to let go of the engine (the model switch)."""
        self.cancel()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running check to end; True when none runs any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    # --- starting by itself ---------------------------------------------------------------
    def due(self) -> bool:
        """True when an automatic check of the served model should start now (see the module doc)."""
        settings = self._settings()
        if not settings.auto_mode_check or self.running:
            return False
        stats = self.queue.stats()
        if stats.running or stats.waiting or stats.idle_seconds < AUTO_IDLE_S or self.submissions.owners():
            return False
        model_dir = settings.model_path
        try:
            if read_identity(model_dir).engine not in QUALITY_ENGINES or not model_has_presets(model_dir):
                return False
            key = identity_key(read_manifest(model_dir, ""))
        except (CosyedgeError, OSError):
            return False
        record = read_record(model_dir)
        return key not in self._tried and (record is None or not record.current)

    def start_if_due(self) -> bool:
        """Start an automatic check when :meth:`due`; True when one started."""
        if not self.due():
            return False
        settings = self._settings()
        try:
            self._tried.add(identity_key(read_manifest(settings.model_path, "")))
            self.start(settings.model, automatic=True)
        except CosyedgeError as exc:
            logger.info("automatic speed-mode check not started: %s", exc.message)
            return False
        return True

    def watch(self, interval: float = 10.0) -> None:
        """Look for a due automatic check every ``interval`` seconds on a daemon thread."""
        if self._watch is not None:
            return

        def loop() -> None:
            while not self._stop_watch.wait(interval):
                try:
                    self.start_if_due()
                except Exception:
                    logger.exception("automatic speed-mode check failed to start")

        self._watch = threading.Thread(target=loop, name="cosyedge-mode-check-watch", daemon=True)
        self._watch.start()

    def close(self) -> None:
        self._stop_watch.set()
        self.stop(timeout=5.0)


def model_has_presets(model_dir: Path) -> bool:
    """True when the model's manifest names a preset-speaker table (CosyVoice SFT speakers)."""
    try:
        manifest = read_manifest(model_dir, "")
    except CosyedgeError:
        return False
    frontend = (manifest.get("config") or {}).get("frontend") or {}
    return bool(frontend.get("presets"))
