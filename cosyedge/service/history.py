"""The page's history: a small JSON record next to each WAV the page made, and the listing of them.

A UI job writes ``outputs/<job-id>.wav``; :func:`record` adds ``outputs/<job-id>.json`` with what
the History tab shows (the start of the text, voice, model, duration, time). The janitor treats the
two as one output (same name before the first dot), so the record goes when its audio goes and the
janitor's rules alone decide what the history holds. :func:`entries` lists the records whose WAV is
still there, newest first. The text start is stored on the box: the page says so.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cosyedge.files import write_atomic

logger = logging.getLogger(__name__)

#: How much of a request's text the record keeps (enough to recognise it in a list).
TEXT_START_CHARS = 80
RECORD_FORMAT = 1


@dataclass(frozen=True)
class HistoryEntry:
    """One output of the page."""

    job_id: str
    text_start: str
    text_chars: int
    voice: str
    engine: str
    model: str
    duration_s: float
    created: float  # time.time() when the WAV was written
    wav: str = ""  # the WAV's path, filled in by :func:`entries` (not stored)

    @property
    def path(self) -> Path:
        return Path(self.wav)


def text_start(text: str) -> str:
    """The first :data:`TEXT_START_CHARS` characters on one line, with an ellipsis when cut."""
    line = " ".join(text.split())
    return line if len(line) <= TEXT_START_CHARS else line[:TEXT_START_CHARS - 1].rstrip() + "…"


def record(wav: Path, text: str, voice: str, engine: str, model: str, duration_s: float) -> HistoryEntry:
    """Write the record of ``wav`` (``<same name>.json``, atomically) and return it."""
    entry = HistoryEntry(job_id=wav.name.split(".", 1)[0], text_start=text_start(text),
                         text_chars=len(text), voice=voice, engine=engine, model=model,
                         duration_s=round(float(duration_s), 3), created=time.time())
    body = {"format": RECORD_FORMAT, **asdict(entry)}
    body.pop("wav")
    write_atomic(wav.with_suffix(".json"), json.dumps(body, ensure_ascii=False).encode("utf-8"))
    return entry


def entries(outputs_dir: Path, limit: int = 50) -> list[HistoryEntry]:
    """The newest ``limit`` records whose WAV is still in ``outputs_dir``; unreadable ones are skipped."""
    found: list[HistoryEntry] = []
    try:
        candidates = [path for path in Path(outputs_dir).glob("*.json") if not path.name.startswith(".")]
    except OSError as exc:
        logger.warning("cannot list %s: %s", outputs_dir, exc)
        return []
    for path in candidates:
        wav = path.with_suffix(".wav")
        if not wav.is_file():
            continue
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(body, dict) or body.get("format") != RECORD_FORMAT:
                continue  # a sidecar of some other kind
            entry = HistoryEntry(job_id=str(body["job_id"]), text_start=str(body["text_start"]),
                                 text_chars=int(body["text_chars"]), voice=str(body["voice"]),
                                 engine=str(body["engine"]), model=str(body["model"]),
                                 duration_s=float(body["duration_s"]), created=float(body["created"]),
                                 wav=str(wav))
        except FileNotFoundError:
            continue  # the janitor took it between the listing and the read
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("skipping unreadable history record %s: %s", path.name, exc)
            continue
        found.append(entry)
    found.sort(key=lambda entry: (entry.created, entry.job_id), reverse=True)
    return found[:limit]
