"""Which model the service serves: the usable models under models/ (:mod:`cosyedge.catalog.models`)
and the switch to another one, from the next job on. The switch never drains or drops a job: it is
refused while any job runs or waits or a request is being checked, and the engine in memory is
released before the next model is chosen, so two models are never held at once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from cosyedge.catalog.models import ModelCatalog, ModelInfo
from cosyedge.config import Settings
from cosyedge.errors import ConflictError
from cosyedge.service.engine_holder import EngineHolder
from cosyedge.service.jobs import JobQueue
from cosyedge.service.submissions import Submissions

logger = logging.getLogger(__name__)


class ModelSwitch:
    """The models of ``catalog``; ``settings`` gives the service's settings, ``set_settings`` replaces
    them (their ``model`` is the one served)."""

    def __init__(self, catalog: ModelCatalog, holder: EngineHolder, queue: JobQueue, submissions: Submissions,
                 settings: Callable[[], Settings], set_settings: Callable[[Settings], None],
                 before_unload: Callable[[], None] = lambda: None,
                 verdicts: Callable[[str], dict[str, Any] | None] = lambda model_id: None) -> None:
        self.catalog = catalog
        self.holder = holder
        self.queue = queue
        self.submissions = submissions
        self._settings = settings
        self._set_settings = set_settings
        # Background work on the served model's engine (the speed-mode check) stops before a switch.
        self._before_unload = before_unload
        self._verdicts = verdicts

    def models(self) -> dict[str, Any]:
        """The usable models under models/ (engine, capabilities, size, licence), which one is
        served, and the directories that hold no usable model with the reason."""
        usable, unusable = self.catalog.scan()
        current = self._settings().model
        return {"current": current, "loaded": self.holder.loaded,
                "models": [{**info.as_dict(), "current": info.id == current,
                            "speed_modes": self._verdicts(info.id)} for info in usable],
                "unusable": [entry.as_dict() for entry in unusable]}

    def switch(self, model_id: str) -> ModelInfo:
        """Serve ``model_id`` from the next job on (it loads then, lazily, as at start).

        Refused with a ConflictError (``model_switch_busy``) while any job runs or waits, or a
        request is being checked: no job is drained or dropped. The engine in memory is released
        before the new model is chosen, so two models are never held at once."""
        info = self.catalog.get(model_id)  # NotFoundError / InputError naming the problem
        with self.submissions.lock:  # no request is queued while the model changes
            jobs = self.queue.stats()
            settings = self._settings()
            if self.queue.active_jobs() or self.submissions.owners():
                raise ConflictError(
                    f"cannot switch to {model_id!r} now: {jobs.running} job(s) running and "
                    f"{jobs.waiting} waiting on {settings.model!r}; switch when they have "
                    "finished (nothing was cancelled)", code="model_switch_busy", model=model_id,
                    current=settings.model, running=jobs.running, waiting=jobs.waiting)
            if model_id == settings.model:
                return info
            self._before_unload()
            self.holder.unload()
            if self.holder.state != "not loaded":  # a load or release still under way
                raise ConflictError(f"cannot switch to {model_id!r} now: {settings.model!r} is "
                                    f"{self.holder.state}; try again in a moment",
                                    code="model_switch_loading", model=model_id,
                                    current=settings.model, state=self.holder.state)
            self.holder.forget()
            self._set_settings(dataclasses.replace(settings, model=model_id))
        logger.info("serving model %s (%s); it loads on the next job", model_id, info.engine)
        return info
