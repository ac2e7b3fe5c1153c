"""A model's speed-mode verdicts: ``models/<id>/modes.json``, what the speed-mode check found on it.

The check (``cosyedge.service.mode_check``) writes one record per model: the date, the voice it was
checked with, the thresholds, the versions of its judges, and per mode the figures against exact and
the verdict ("recommended on this model" or not). The record belongs to the model's identity: the
manifest's files (name -> sha256) and its ``converter`` line, hashed into :func:`identity_key`. A
reconversion (new files or a new converter) or another model in the folder makes it *stale*: it is
still shown, marked so, and never used as a verdict. An OTA update of cosyedge leaves the manifest,
and so the record, as they are.

``modes.json`` is not a model file: the manifest does not list it, so ``verify_files``, the catalog's
import and the self-test never look at it. It is written atomically (``files.write_atomic``): a
check cut off by a restart or a cancel leaves the previous record whole, and the temporary file of a
write killed mid-way is removed by the next write.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosyedge.catalog.manifest import MANIFEST_NAME, read_manifest
from cosyedge.errors import CosyedgeError
from cosyedge.files import TEMP_PREFIX, write_atomic

logger = logging.getLogger(__name__)

RESULT_NAME = "modes.json"
FORMAT_VERSION = 1
#: The suffix of a record being written (``write_atomic``'s temporary file): one a killed process left
#: is removed by the next write.
PARTIAL_SUFFIX = ".modes-partial"


def identity_key(manifest: dict) -> str:
    """sha256 over the manifest's files (name -> sha256) and its converter line: what a check's
    verdicts hold for."""
    files = {str(name): str(info.get("sha256")) for name, info in sorted(manifest.get("files", {}).items())
             if isinstance(info, dict)}
    text = json.dumps({"files": files, "converter": manifest.get("converter")}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_identity_key(model_dir: Path) -> str:
    """:func:`identity_key` of the model in ``model_dir`` (one JSON read, no file hashed)."""
    return identity_key(read_manifest(model_dir, "convert the model again"))


@dataclass(frozen=True)
class ModeRecord:
    """A model's stored check: ``data`` as written, ``current`` when it holds for the model now in
    the folder (False: stale, after a reconversion or with another model)."""

    data: dict[str, Any]
    current: bool

    @property
    def date(self) -> str:
        """The day the check finished (UTC, ``YYYY-MM-DD``)."""
        return str(self.data.get("finished", ""))[:10]

    @property
    def voice(self) -> dict[str, Any]:
        """The voice it was checked with: ``{"kind": "preset" | "saved", "id", "name"}``."""
        return dict(self.data.get("voice") or {})

    def mode(self, name: str) -> dict[str, Any] | None:
        """The figures and verdict of mode ``name``, if it was checked."""
        return (self.data.get("modes") or {}).get(name)

    def summary(self) -> dict[str, Any]:
        """What ``GET /models`` and ``models list`` carry: date, voice, stale or not, and per mode its
        verdict with the two figures the rules read."""
        modes = {}
        for name, entry in (self.data.get("modes") or {}).items():
            figures = entry.get("figures") or {}
            modes[name] = {"recommended": bool(entry.get("verdict", {}).get("recommended")) and self.current,
                           "failed": list(entry.get("verdict", {}).get("failed", [])),
                           "similarity": figures.get("similarity"),
                           "intelligibility_delta": figures.get("intelligibility_delta")}
        return {"checked": self.date, "stale": not self.current, "voice": self.voice,
                "judge": self.data.get("judge"), "modes": modes}


def read_record(model_dir: Path) -> ModeRecord | None:
    """The stored check of the model in ``model_dir``; None when there is none or it cannot be read
    (a damaged record is as good as none: the next check replaces it)."""
    path = Path(model_dir) / RESULT_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            raise ValueError("not a speed-mode record of this format")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("ignoring %s: %s", path, exc)
        return None
    try:
        current = data.get("identity") == model_identity_key(model_dir)
    except CosyedgeError:
        current = False
    return ModeRecord(data, current)


def write_record(model_dir: Path, data: dict[str, Any]) -> Path:
    """Store a finished check atomically, stamped with the model's identity and this format."""
    model_dir = Path(model_dir)
    if not (model_dir / MANIFEST_NAME).is_file():
        raise FileNotFoundError(f"{model_dir} holds no model")
    record = {"format": FORMAT_VERSION, "identity": model_identity_key(model_dir), **data}
    text = json.dumps(record, indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    for left in model_dir.glob(f"{TEMP_PREFIX}*{PARTIAL_SUFFIX}"):  # a write a killed process left
        left.unlink(missing_ok=True)
    return write_atomic(model_dir / RESULT_NAME, text.encode("utf-8"), suffix=PARTIAL_SUFFIX, mode=0o644)


def today() -> str:
    """Now in UTC, as the record's timestamps are written."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
