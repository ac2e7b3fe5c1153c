"""Janitor: keeps outputs/ from filling the disk of an unattended box.

:func:`sweep` is a pure function of a directory listing, a clock value and a :class:`JanitorPolicy`;
:class:`Janitor` is the small named daemon thread that calls it at start and every few minutes.

What a sweep removes, oldest first:

* every output older than ``max_age_s``;
* then more of the oldest outputs while the rest exceeds ``max_total_bytes`` or ``max_files``;
* leftover temp files (``.tmp-*``, from :func:`cosyedge.audio.write_wav_atomic`) older than
  ``tmp_grace_s``.

An *output* is one job: all files in the top level of outputs/ that share the name before the first
dot (``<job>.wav`` with its ``<job>.json`` sidecar), so a sidecar is never orphaned. What it never
removes: anything in use (a running job writes it or a client downloads it), anything younger than
``min_age_s`` (an output dated further in the future, written while the clock was ahead, is not
young: the size and count limits still remove it, last), files whose suffix is not an output suffix
(``README.md``), subdirectories, symlink targets (a link is removed as a link, and a link into a
protected directory not at all), and a whole outputs_dir that resolves under a protected directory
(prompts/, models/). A file that cannot be read or removed is logged and skipped; the sweep goes on.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from cosyedge.config import Settings

logger = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
OUTPUT_SUFFIXES = (".wav", ".json", ".mp3", ".ogg", ".flac", ".opus")

InUseFn = Callable[[], Iterable[Path]]


@dataclass(frozen=True)
class JanitorPolicy:
    """Limits for outputs/; a limit of 0 means "no limit"."""

    max_age_s: float = 24 * 3600.0
    max_total_bytes: int = 1024 * 1024 * 1024
    max_files: int = 500  # outputs (jobs), not files: a .wav and its .json count once
    min_age_s: float = 120.0  # never remove anything this fresh, whatever the size/count says
    tmp_grace_s: float = 3600.0  # an abandoned temp file older than this is removed
    suffixes: tuple[str, ...] = OUTPUT_SUFFIXES
    protected: tuple[Path, ...] = field(default_factory=tuple)  # e.g. prompts/, models/

    @classmethod
    def from_settings(cls, settings: Settings) -> "JanitorPolicy":
        return cls(max_age_s=settings.janitor_max_age_hours * 3600.0,
                   max_total_bytes=int(settings.janitor_max_total_mb * 1024 * 1024),
                   max_files=settings.janitor_max_files,
                   protected=(settings.prompts_path, settings.models_path))


@dataclass
class _Output:
    """One job's files in outputs/."""

    key: str
    files: list[tuple[Path, int]] = field(default_factory=list)  # (path, size)
    mtime: float = 0.0  # newest file: the output is as young as its youngest part

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _is_under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _scan(outputs_dir: Path, policy: JanitorPolicy,
          protected: tuple[Path, ...]) -> tuple[list[_Output], list[tuple[Path, float]]]:
    """Group the top-level files of outputs/ by job; list temp files apart.

    Paths come back under the resolved outputs_dir, so they compare directly with resolved in-use
    paths; only symlinks are resolved one by one (a resolve costs a syscall per path component).
    """
    outputs: dict[str, _Output] = {}
    temps: list[tuple[Path, float]] = []
    try:
        entries = list(os.scandir(outputs_dir))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        logger.warning("janitor: cannot list %s: %s", outputs_dir, exc)
        return [], []
    for entry in entries:
        path = outputs_dir / entry.name
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as exc:
            logger.warning("janitor: skipping %s: %s", path, exc)
            continue
        if stat.S_ISLNK(info.st_mode):
            if _is_under(_resolved(path), protected):
                continue  # a link into prompts/ or models/: leave it alone entirely
        elif not stat.S_ISREG(info.st_mode):
            continue  # subdirectories and special files are not ours
        if entry.name.startswith(TMP_PREFIX):
            temps.append((path, info.st_mtime))
            continue
        if entry.name.startswith(".") or path.suffix.lower() not in policy.suffixes:
            continue
        key = entry.name.split(".", 1)[0]
        out = outputs.setdefault(key, _Output(key))
        out.files.append((path, info.st_size))
        out.mtime = max(out.mtime, info.st_mtime)
    return sorted(outputs.values(), key=lambda o: (o.mtime, o.key)), temps


def sweep(outputs_dir: str | os.PathLike[str], now: float, policy: JanitorPolicy = JanitorPolicy(),
          in_use: frozenset[Path] | set[Path] = frozenset(), dry_run: bool = False) -> list[Path]:
    """Remove what the policy says must go; return the paths removed (or that would be, on a dry run).

    ``now`` is a ``time.time()`` value, so tests set file ages with ``os.utime``. ``in_use`` holds
    paths that must survive whatever their age (jobs writing, clients downloading).
    """
    outputs_dir = _resolved(Path(outputs_dir))
    protected = tuple(_resolved(Path(p)) for p in policy.protected)
    if _is_under(outputs_dir, protected):
        logger.error("janitor: %s lies under a protected directory; not sweeping it", outputs_dir)
        return []
    busy = {_resolved(Path(p)) for p in in_use}
    outputs, temps = _scan(outputs_dir, policy, protected)

    def removable(out: _Output) -> bool:
        # Fresh means written within min_age_s of now. An mtime further ahead than that comes from a
        # clock that was wrong and has been put back: undatable, not fresh, so still within reach of
        # the size and count limits (it sorts last); the age limit cannot reach it.
        if abs(now - out.mtime) < policy.min_age_s:
            return False
        return not any(path in busy for path, _ in out.files)

    doomed: list[_Output] = []
    kept: list[_Output] = []
    for out in outputs:
        too_old = policy.max_age_s > 0 and now - out.mtime > policy.max_age_s
        (doomed if too_old and removable(out) else kept).append(out)
    total = sum(out.size for out in kept)
    count = len(kept)
    for out in kept:  # oldest first; stops removing once under both limits
        over_size = policy.max_total_bytes > 0 and total > policy.max_total_bytes
        over_count = policy.max_files > 0 and count > policy.max_files
        if (over_size or over_count) and removable(out):
            doomed.append(out)
            total -= out.size
            count -= 1
    if policy.max_total_bytes > 0 and total > policy.max_total_bytes:
        logger.warning("janitor: outputs still hold %d bytes (limit %d): the rest is in use or fresh",
                       total, policy.max_total_bytes)

    targets = [path for out in doomed for path, _ in out.files]
    targets += [path for path, mtime in temps
                if now - mtime > policy.tmp_grace_s and path not in busy]
    if dry_run:
        return targets
    removed: list[Path] = []
    for path in targets:
        try:
            path.unlink()
        except FileNotFoundError:
            continue  # gone already (a client deleted it); nothing to do
        except OSError as exc:
            logger.warning("janitor: cannot remove %s: %s", path, exc)
            continue
        removed.append(path)
    if removed:
        logger.info("janitor: removed %d file(s) from %s", len(removed), outputs_dir)
    return removed


class Janitor:
    """A named daemon thread that sweeps outputs/ at start and then every ``interval_s`` seconds.

    ``in_use`` is called before each sweep (the service's ``in_use_paths``); a failing sweep is
    logged and the thread keeps going.
    """

    def __init__(self, outputs_dir: str | os.PathLike[str], policy: JanitorPolicy, interval_s: float,
                 in_use: InUseFn | None = None, clock: Callable[[], float] = time.time,
                 name: str = "cosyedge-janitor") -> None:
        self.outputs_dir = Path(outputs_dir)
        self.policy = policy
        self.interval_s = interval_s
        self._in_use = in_use
        self._clock = clock
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sweeps = 0  # completed sweeps, for /health and tests
        self.last_removed: list[Path] = []

    @classmethod
    def from_settings(cls, settings: Settings, in_use: InUseFn | None = None) -> "Janitor":
        return cls(settings.outputs_path, JanitorPolicy.from_settings(settings),
                   settings.janitor_interval_minutes * 60.0, in_use)

    def run_once(self) -> list[Path]:
        """One sweep now, in the calling thread."""
        in_use = frozenset(Path(p) for p in self._in_use()) if self._in_use else frozenset()
        removed = sweep(self.outputs_dir, self._clock(), self.policy, in_use)
        self.last_removed = removed
        self.sweeps += 1
        return removed

    def _run(self) -> None:
        while True:
            try:
                self.run_once()
            except Exception:  # the thread must outlive any one bad sweep
                logger.exception("janitor: sweep of %s failed", self.outputs_dir)
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> "Janitor":
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        logger.info("janitor: sweeping %s every %.0f s", self.outputs_dir, self.interval_s)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
