"""The free-disk guard: refuse new uploads and jobs while the disk is nearly full.

A job that starts on a nearly full disk fails mid-write, and after that saved voices and outputs
fail too. :class:`DiskGuard` checks the folders the box writes to (outputs/, prompts/, the page's
upload cache) against one threshold before work is accepted, and refuses with a coded
:class:`~cosyedge.errors.StorageFullError` (``disk_low``) that says how much is free and what to do.
The probe (free bytes of a folder) is a seam: tests hand in their own.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Callable, Iterable

from cosyedge.errors import StorageFullError

logger = logging.getLogger(__name__)

#: Free bytes of the file system holding a folder.
FreeProbe = Callable[[Path], int]


def free_bytes(folder: Path) -> int:
    """Free bytes for an unprivileged writer on the file system holding ``folder`` (or the nearest
    existing folder above it: outputs/ may not exist yet)."""
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


class DiskGuard:
    """Refuses work while any watched folder's file system has less than ``min_free_bytes`` free
    (0 = never refuse)."""

    def __init__(self, folders: Iterable[str | os.PathLike[str]], min_free_bytes: int,
                 probe: FreeProbe = free_bytes) -> None:
        self.min_free_bytes = int(min_free_bytes)
        self._probe = probe
        self._lock = threading.Lock()
        self._folders: list[Path] = []
        for folder in folders:
            self.watch(folder)

    def watch(self, folder: str | os.PathLike[str]) -> None:
        """Also check ``folder`` (app.py adds the page's upload cache)."""
        with self._lock:
            path = Path(folder)
            if path not in self._folders:
                self._folders.append(path)

    @property
    def folders(self) -> tuple[Path, ...]:
        with self._lock:
            return tuple(self._folders)

    def lowest(self) -> tuple[Path, int] | None:
        """The watched folder with the least free space and its free bytes (None: none watched or
        none readable)."""
        worst: tuple[Path, int] | None = None
        for folder in self.folders:
            try:
                free = int(self._probe(folder))
            except OSError as exc:
                logger.warning("cannot read the free space of %s: %s", folder, exc)
                continue
            if worst is None or free < worst[1]:
                worst = (folder, free)
        return worst

    def check(self, what: str = "new work") -> None:
        """Raise StorageFullError (``disk_low``) when a watched folder is under the threshold."""
        if self.min_free_bytes <= 0:
            return
        worst = self.lowest()
        if worst is None or worst[1] >= self.min_free_bytes:
            return
        folder, free = worst
        free_mb, min_mb = free / 1e6, self.min_free_bytes / 1e6
        logger.warning("refusing %s: %s has %.1f MB free (threshold %.0f MB)", what, folder, free_mb, min_mb)
        raise StorageFullError(f"the disk is nearly full ({free_mb:.1f} MB free where {folder} is, at "
                               f"least {min_mb:.0f} MB are kept free): {what} is refused so that "
                               "nothing is cut off half-written; delete old outputs or free space "
                               "on the box, then try again", code="disk_low", folder=str(folder),
                               free_mb=round(free_mb, 1), min_free_mb=round(min_mb), what=what)
