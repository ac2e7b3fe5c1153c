"""The one engine of the process: :class:`EngineHolder` loads it on first use (nothing heavy at
start), counts its users, and releases it after ``idle_unload_minutes`` without use so the memory
returns to the system. :func:`load_engine` is how the service layer loads the served model's engine
(the service's default factory; the CLI commands that need an engine outside a queued job)."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from typing import Callable, Iterator

from cosyedge.config import Settings
from cosyedge.engines.base import Capabilities, Engine
from cosyedge.host.heap import trim_heap

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]


def load_engine(settings: Settings) -> Engine:
    """The engine of ``settings``' model, loaded now (sessions, weights: heavy)."""
    from cosyedge.engines.loader import load_engine as load

    return load(settings)


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc keeps them otherwise)."""
    gc.collect()
    trim_heap()


class EngineHolder:
    """Owns the one engine instance: lazy load, user count, idle unload.

    ``use()`` loads the engine if needed (one loader at a time; others wait), counts the caller as a
    user and yields the engine. ``unload_if_idle()`` releases it only when nobody uses it and the
    last use ended ``idle_seconds`` ago (0 = never unload).
    """

    def __init__(self, factory: EngineFactory, idle_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._cond = threading.Condition()
        self._engine: Engine | None = None
        self._loading = False
        self._releasing = False  # between dropping the engine and the memory being returned
        self._users = 0
        self._last_used = clock()
        self.loads = 0
        self.unloads = 0
        # Facts remembered across unloads, so status and /voices need no reload.
        self.name: str | None = None
        self.model_id: str | None = None
        self.presets: list[str] | None = None
        self.capabilities: Capabilities | None = None

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    @property
    def state(self) -> str:
        with self._cond:
            if self._engine is not None:
                return "loaded"
            if self._releasing:
                return "releasing memory…"
            return "loading model…" if self._loading else "not loaded"

    @contextlib.contextmanager
    def use(self, on_loading: Callable[[], None] | None = None) -> Iterator[Engine]:
        """Yield the loaded engine for the duration of one job."""
        with self._cond:
            self._users += 1
            while self._loading or self._releasing:
                self._cond.wait()
            must_load = self._engine is None
            if must_load:
                self._loading = True
        try:
            if must_load:
                if on_loading is not None:
                    on_loading()
                self._load()
            engine = self._engine
            assert engine is not None  # internal invariant: set by _load or kept alive by _users
            yield engine
        finally:
            with self._cond:
                self._users -= 1
                self._last_used = self._clock()
                self._cond.notify_all()

    def _load(self) -> None:
        started = time.monotonic()
        try:
            engine = self._factory()
        except BaseException:
            with self._cond:
                self._loading = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._engine = engine
            self._loading = False
            self.loads += 1
            self.name = engine.name
            self.model_id = engine.model_id
            self.capabilities = engine.capabilities
            self.presets = list(engine.presets())
            self._cond.notify_all()
        logger.info("engine %s (%s) loaded in %.1f s", engine.name, engine.model_id,
                    time.monotonic() - started)

    def forget(self) -> None:
        """Drop the facts remembered of the last engine (after :meth:`unload`, before another
        model is served: its name, presets and capabilities are not the next model's)."""
        with self._cond:
            self.name = self.model_id = None
            self.presets = None
            self.capabilities = None

    def unload_if_idle(self) -> bool:
        """Release the engine when unused for ``idle_seconds``; True when it was released."""
        if self.idle_seconds <= 0:
            return False
        with self._cond:
            if (self._engine is None or self._users or self._loading
                    or self._clock() - self._last_used < self.idle_seconds):
                return False
        return self.unload()

    def unload(self) -> bool:
        """Release the engine now unless a job uses it; True when it was released."""
        with self._cond:
            if self._engine is None or self._users or self._loading:
                return False
            engine, self._engine = self._engine, None
            self._releasing = True
            self.unloads += 1
        try:
            engine.close()
        except Exception:
            logger.exception("engine close failed; dropping it anyway")
        finally:
            del engine
            release_memory()
            with self._cond:
                self._releasing = False
                self._cond.notify_all()
        logger.info("engine unloaded after %.0f s idle", self.idle_seconds)
        return True
