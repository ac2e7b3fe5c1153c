"""Janitor: keeps outputs/ from filling the disk of an unattended box.

:func:`sweep` is a pure function of a directory listing, a clock value and a :class:`JanitorPolicy`;
:class:`Janitor` is the small named daemon thread that calls it at start and every few minutes.

What a sweep removes, oldest first:

* every output older than ``max_age_s``;
* then more of the oldest outputs while the rest exceeds ``max_total_bytes`` or ``max_files``;
* leftover temp files (``.tmp-*``, from :func:`cosyedge.audio.write_wav_atomic`) older than
  ``tmp_grace_s``.

An *output* is one job: all files in the top level of outputs/ that share the name before the first
dot (``<job>.wav`` with its ``<job>.json`` and caption ``<job>.vtt``/``.srt`` sidecars), so a sidecar
is never orphaned. What it never
removes: anything in use (a running job writes it or a client downloads it), anything younger than
``min_age_s`` (an output dated further in the future, written while the clock was ahead, is not
young: the size and count limits still remove it, last), files whose suffix is not an output suffix
(``README.md``), subdirectories, symlink targets (a link is removed as a link, and a link into a
protected directory not at all), and a whole outputs_dir that resolves under a protected directory
(prompts/, models/). A file that cannot be read or removed is logged and skipped; the sweep goes on.

:func:`sweep_uploads` keeps the page's upload cache (Gradio's: one folder per upload, recording or
result copy, kept a day) under a total size and count, oldest folder first, never one holding a
file in use (a prompt a job or the page has just read: the service leases it) and never an upload
still arriving (Gradio's loose temp files at the top, until ``partial_grace_s``). The page's upload
route calls it after every upload (:mod:`cosyedge.web.upload_guard`), so a flood of uploads cannot
outgrow the cap between two periodic sweeps.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from cosyedge.config import Settings

logger = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
#: .zip: a lesson's paragraphs; .srt/.vtt: an output's captions (removed with its audio, as one output)
OUTPUT_SUFFIXES = (".wav", ".json", ".mp3", ".ogg", ".flac", ".opus", ".zip", ".srt", ".vtt")

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
          in_use: frozenset[Path] | set[Path] | Callable[[], Iterable[Path]] = frozenset(),
          dry_run: bool = False) -> list[Path]:
    """Remove what the policy says must go; return the paths removed (or that would be, on a dry run).

    ``now`` is a ``time.time()`` value, so tests set file ages with ``os.utime``. ``in_use`` holds
    paths that must survive whatever their age (jobs writing, clients downloading); given as a
    callable, it is asked after the scan, so a file a job created while the scan ran is in it.
    """
    outputs_dir = _resolved(Path(outputs_dir))
    protected = tuple(_resolved(Path(p)) for p in policy.protected)
    if _is_under(outputs_dir, protected):
        logger.error("janitor: %s lies under a protected directory; not sweeping it", outputs_dir)
        return []
    outputs, temps = _scan(outputs_dir, policy, protected)
    # A job marks its file in use before creating it and leases it before unmarking it, so a
    # snapshot taken after the scan covers every file the scan saw that is in use.
    busy = {_resolved(Path(p)) for p in (in_use() if callable(in_use) else in_use)}

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


@dataclass(frozen=True)
class UploadPolicy:
    """Limits for the page's upload cache; a limit of 0 means "no limit"."""

    max_total_bytes: int = 512 * 1024 * 1024
    max_entries: int = 2000  # folders: many tiny uploads cost the sweep more than their bytes
    partial_grace_s: float = 600.0  # a loose file younger than this may be an upload still arriving
    protected: tuple[Path, ...] = field(default_factory=tuple)

    @classmethod
    def from_settings(cls, settings: Settings) -> "UploadPolicy":
        return cls(max_total_bytes=int(settings.upload_cache_max_mb * 1024 * 1024),
                   protected=(settings.prompts_path, settings.models_path, settings.outputs_path))


def _tree(path: Path) -> tuple[int, float]:
    """(bytes, newest mtime) of the regular files under ``path``, links not followed."""
    size, newest = 0, 0.0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + dirs:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            newest = max(newest, info.st_mtime)
            if stat.S_ISREG(info.st_mode):
                size += info.st_size
    try:
        newest = max(newest, os.lstat(path).st_mtime)
    except OSError:
        pass
    return size, newest


def sweep_uploads(cache_dir: str | os.PathLike[str], now: float, policy: UploadPolicy = UploadPolicy(),
                  in_use: frozenset[Path] | set[Path] = frozenset(), dry_run: bool = False) -> list[Path]:
    """Remove the oldest folders of the upload cache while it holds more than the policy allows;
    stale loose files (abandoned uploads) go too. Returns what was removed (or would be)."""
    cache_dir = _resolved(Path(cache_dir))
    protected = tuple(_resolved(Path(p)) for p in policy.protected)
    if _is_under(cache_dir, protected) or any(_is_under(p, (cache_dir,)) for p in protected):
        logger.error("janitor: the upload cache %s overlaps a protected directory; not sweeping it",
                     cache_dir)
        return []
    busy = {_resolved(Path(p)) for p in in_use}
    try:
        entries = list(os.scandir(cache_dir))
    except OSError:
        return []
    folders: list[tuple[float, str, Path, int]] = []  # (newest mtime, name, path, bytes)
    loose: list[tuple[Path, float, int]] = []
    for entry in entries:
        path = cache_dir / entry.name
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            size, newest = _tree(path)
            folders.append((newest, entry.name, path, size))
        elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
            loose.append((path, info.st_mtime, info.st_size if stat.S_ISREG(info.st_mode) else 0))
    folders.sort()
    total = sum(f[3] for f in folders) + sum(size for _, _, size in loose)
    count = len(folders)
    doomed: list[Path] = [path for path, mtime, _ in loose
                          if now - mtime > policy.partial_grace_s and path not in busy]
    total -= sum(size for path, _, size in loose if path in doomed)
    for _, _, path, size in folders:  # oldest first; stops once under both limits
        over_size = policy.max_total_bytes > 0 and total > policy.max_total_bytes
        over_count = policy.max_entries > 0 and count > policy.max_entries
        if not (over_size or over_count):
            break
        if any(p == path or path in p.parents for p in busy):
            continue  # a prompt a job or the page is using
        doomed.append(path)
        total -= size
        count -= 1
    if policy.max_total_bytes > 0 and total > policy.max_total_bytes:
        logger.warning("janitor: the upload cache still holds %d bytes (cap %d): the rest is in use "
                       "or still arriving", total, policy.max_total_bytes)
    if dry_run:
        return doomed
    removed: list[Path] = []
    for path in doomed:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("janitor: cannot remove %s: %s", path, exc)
            continue
        removed.append(path)
    if removed:
        logger.info("janitor: removed %d upload(s) from %s", len(removed), cache_dir)
    return removed


class Janitor:
    """A named daemon thread that sweeps outputs/ at start and then every ``interval_s`` seconds.

    ``in_use`` is called before each sweep (the service's ``in_use_paths``); a failing sweep is
    logged and the thread keeps going. With ``uploads_dir`` each sweep also keeps the page's upload
    cache within ``upload_policy``; :meth:`sweep_uploads` does that alone, at once (after an upload).
    """

    def __init__(self, outputs_dir: str | os.PathLike[str], policy: JanitorPolicy, interval_s: float,
                 in_use: InUseFn | None = None, clock: Callable[[], float] = time.time,
                 name: str = "cosyedge-janitor", uploads_dir: str | os.PathLike[str] | None = None,
                 upload_policy: UploadPolicy = UploadPolicy()) -> None:
        self.outputs_dir = Path(outputs_dir)
        self.policy = policy
        self.uploads_dir = Path(uploads_dir) if uploads_dir is not None else None
        self.upload_policy = upload_policy
        self._uploads_lock = threading.Lock()  # the thread and the upload route may both sweep
        self.interval_s = interval_s
        self._in_use = in_use
        self._clock = clock
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sweeps = 0  # completed sweeps, for /health and tests
        self.last_removed: list[Path] = []

    @classmethod
    def from_settings(cls, settings: Settings, in_use: InUseFn | None = None,
                      uploads_dir: str | os.PathLike[str] | None = None) -> "Janitor":
        return cls(settings.outputs_path, JanitorPolicy.from_settings(settings),
                   settings.janitor_interval_minutes * 60.0, in_use, uploads_dir=uploads_dir,
                   upload_policy=UploadPolicy.from_settings(settings))

    def _busy(self) -> frozenset[Path]:
        return frozenset(Path(p) for p in self._in_use()) if self._in_use else frozenset()

    def run_once(self) -> list[Path]:
        """One sweep now, in the calling thread: outputs/, then the upload cache."""
        removed = sweep(self.outputs_dir, self._clock(), self.policy, self._busy)
        if self.uploads_dir is not None:
            removed += self.sweep_uploads()
        self.last_removed = removed
        self.sweeps += 1
        return removed

    def sweep_uploads(self) -> list[Path]:
        """Keep the upload cache within its policy now (nothing when there is no upload cache)."""
        if self.uploads_dir is None:
            return []
        with self._uploads_lock:
            return sweep_uploads(self.uploads_dir, self._clock(), self.upload_policy, self._busy())

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
