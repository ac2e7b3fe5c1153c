"""Filesystem helpers shared by every writer: readers only ever see complete files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Prefix of in-progress files; the janitor and the file routes know it (never served, swept when old).
TEMP_PREFIX = ".tmp-"


def write_atomic(path: str | os.PathLike[str], data: bytes, suffix: str = "", mode: int | None = None) -> Path:
    """Write ``data`` to a temp file in the same folder, fsync it, then rename it over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
