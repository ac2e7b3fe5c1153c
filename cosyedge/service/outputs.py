"""The outputs folder as the service writes it: a result's WAV and captions written atomically
(:func:`write_wav`, :func:`write_captions`: the one disk-full mapping, also the CLI's ``-o`` and
``--captions``), the files the janitor must leave alone
(:meth:`OutputFiles.in_use_paths`: being written, or leased to a client still downloading), the
page's history record next to a page WAV, and the half-written files a killed process left."""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from cosyedge.audio import write_wav_atomic
from cosyedge.errors import StorageFullError
from cosyedge.files import write_atomic
from cosyedge.service import history
from cosyedge.service.captions import FORMATS, Captions, caption_format
from cosyedge.service.requests import TTSResult

logger = logging.getLogger(__name__)

#: How long a UI client may still download a finished WAV before the janitor may remove it.
DOWNLOAD_LEASE_S = 30 * 60


class OutputFiles:
    """The files of ``folder`` (outputs/) that jobs write and clients download."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._writing: set[Path] = set()
        self._leases: dict[Path, float] = {}

    def in_use_paths(self) -> set[Path]:
        """Files the janitor must not delete: WAVs being written and recent UI downloads."""
        now = time.monotonic()
        with self._lock:
            for path in [p for p, until in self._leases.items() if until <= now]:
                del self._leases[path]
            return set(self._writing) | set(self._leases)

    def lease(self, path: Path, seconds: float = DOWNLOAD_LEASE_S) -> None:
        """Protect a finished file from the janitor for a while (a client is downloading it)."""
        with self._lock:
            self._leases[Path(path).resolve()] = time.monotonic() + seconds

    @contextlib.contextmanager
    def writing(self, paths: Iterable[Path]) -> Iterator[None]:
        """Keep the janitor away from ``paths`` while they are being written."""
        paths = list(paths)
        with self._lock:
            self._writing.update(paths)
        try:
            yield
        finally:
            with self._lock:
                self._writing.difference_update(paths)

    def write(self, job_id: str, audio: np.ndarray, sample_rate: int) -> Path:
        """A job's WAV, ``outputs/<job-id>.wav``, written and then leased to the client."""
        path = (self.folder / f"{job_id}.wav").resolve()
        with self.writing([path]):
            write_wav(path, audio, sample_rate)
            self.lease(path)
        return path

    def write_captions(self, job_id: str, captions: Captions) -> dict[str, Path]:
        """A job's captions next to its WAV, ``outputs/<job-id>.srt`` and ``.vtt`` (the janitor
        removes them with it), leased like the WAV; by format."""
        files = {fmt: (self.folder / f"{job_id}.{fmt}").resolve() for fmt in FORMATS}
        with self.writing(files.values()):
            for fmt, path in files.items():
                write_captions(path, captions)
                self.lease(path)
        return files

    def record_history(self, result: TTSResult, text: str) -> None:
        """The History tab's record of a page output (:mod:`cosyedge.service.history`); a record that cannot
        be written costs the list an entry, never the result."""
        assert result.path is not None
        try:
            history.record(result.path, text, voice=str(result.voice), engine=result.engine,
                           model=result.model_id, duration_s=result.duration)
        except OSError as exc:
            logger.warning("could not write the history record of %s: %s", result.path.name, exc)

    def remove_partial(self) -> int:
        """Delete ``.tmp-*`` files in outputs/: half-written WAVs of a process that was killed.

        Run at start, before any job of this process can be writing one; returns how many.
        """
        removed = 0
        try:
            leftovers = list(self.folder.glob(".tmp-*"))
        except OSError:
            return 0
        for path in leftovers:
            try:
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed += 1
            except OSError as exc:
                logger.warning("could not remove leftover %s: %s", path, exc)
        if removed:
            logger.warning("removed %d half-written file(s) left in %s by an earlier crash", removed, self.folder)
        return removed


def write_captions(path: Path, captions: Captions) -> Path:
    """Captions written atomically in the format of ``path``'s suffix (``.srt`` or ``.vtt``, else a
    coded refusal); a full disk is the same StorageFullError as a WAV's."""
    text = captions.render(caption_format(Path(path).suffix)).encode("utf-8")
    try:
        return write_atomic(path, text, suffix=Path(path).suffix)
    except OSError as exc:
        raise _storage_full(exc, Path(path), len(text) / 1e6) from exc


def _storage_full(exc: OSError, path: Path, needed_mb: float) -> StorageFullError:
    """The one wording of a full disk for a result's file (raises ``exc`` itself when it is another error)."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        raise exc
    free = shutil.disk_usage(path.parent).free / 1e6
    return StorageFullError(f"the disk holding {path.parent} is full ({free:.1f} MB free, this result needs "
                            f"{needed_mb:.1f} MB): old outputs can be deleted to make room", code="disk_full",
                            folder=str(path.parent), free_mb=free, needed_mb=needed_mb)


def write_wav(path: Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write a result's WAV atomically (:func:`cosyedge.audio.write_wav_atomic`); a full disk or
    quota is a StorageFullError saying how much room there is and how much the result needs (the
    one mapping, for the service's outputs and the CLI's ``-o``). Other OSErrors are raised as they
    are, for the caller to word."""
    try:
        return write_wav_atomic(path, audio, sample_rate)
    except OSError as exc:
        raise _storage_full(exc, path, len(audio) * 2 / 1e6) from exc
