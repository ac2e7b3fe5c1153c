"""The speed-mode check itself: render a fixed line set in ``exact`` and in each other ``quality`` mode
of the loaded engine, score each mode against exact, and make the record ``modes.json`` holds.

Every line (``mode_check_lines.json``: six short sentences per language, the languages of the file
that the model speaks) is rendered once per mode with the same voice and the same seed (one seed
per line, the same in every mode), streamed where the engine streams (the live modes' levers act on
streamed answers). Each rendition is then heard by the recognizer and embedded by the judge, once,
and :func:`cosyedge.listening.mode_scores.compare` gives each mode's figures against exact's;
:class:`~cosyedge.listening.mode_scores.Thresholds` its verdict.

The check is low-priority work: before every render and every score it asks its :class:`Gate`
whether it may go on (the scheduler's gate waits while a user's job runs or waits, and raises
CancelledError when the check is cancelled), and a render the gate interrupts (a user's job came)
is dropped and rendered again later, from the same seed. Scheduling, cancelling and storing are
the runner's (:mod:`cosyedge.service.mode_check_runner`); this module holds the work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from cosyedge import __version__
from cosyedge.catalog.mode_verdicts import today
from cosyedge.engines.base import Engine, SynthesisOptions, VoicePrompt
from cosyedge.engines.render import render
from cosyedge.errors import CancelledError, CosyedgeError, InputError
from cosyedge.listening import mode_scores
from cosyedge.listening.mode_scores import Hear, Rendition, Thresholds

logger = logging.getLogger(__name__)

LINES_FILE = Path(__file__).with_name("mode_check_lines.json")
#: Line i of the set is rendered with seed ``SEED_BASE + i`` in every mode.
SEED_BASE = 20260
EXACT = "exact"


class Gate(Protocol):
    """What the check asks between its steps (the runner's yielding gate; a plain one in the CLI)."""

    def wait(self) -> None:
        """Return when the check may do its next step; raise CancelledError when it is cancelled."""

    def interrupted(self) -> bool:
        """True while the step under way should stop (a user's job came, or a cancel)."""


class FreeGate:
    """A gate that never waits: the CLI's check, alone in its process; ``cancelled`` stops it."""

    def __init__(self, cancelled: Callable[[], bool] = lambda: False) -> None:
        self._cancelled = cancelled

    def wait(self) -> None:
        if self._cancelled():
            raise CancelledError("the speed-mode check was cancelled")

    def interrupted(self) -> bool:
        return self._cancelled()


@dataclass(frozen=True)
class CheckVoice:
    """The voice a check renders with: a preset (an SFT speaker) or a saved voice the user picked."""

    kind: str  # "preset" | "saved"
    id: str
    name: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "name": self.name}

    def words(self) -> str:
        """``preset 中文女`` / ``saved voice Ms Li``: how notes and the page name it."""
        return f"preset {self.name}" if self.kind == "preset" else f"saved voice {self.name}"


@dataclass(frozen=True)
class Line:
    text: str
    language: str
    seed: int


def all_lines() -> dict[str, list[str]]:
    """The committed line set, by language."""
    return json.loads(LINES_FILE.read_text(encoding="utf-8"))["lines"]


def lines_digest() -> str:
    """sha256 of the line set, stored with each record (a changed set is named, not hidden)."""
    return hashlib.sha256(LINES_FILE.read_bytes()).hexdigest()


def check_lines(languages: Sequence[str], per_language: int | None = None) -> list[Line]:
    """The lines of ``languages`` (those the set has, in the set's order), each with its seed;
    ``per_language`` keeps only the first so many of each (a shorter check)."""
    lines: list[Line] = []
    for language, texts in all_lines().items():
        if language in languages:
            for text in texts[:per_language]:
                lines.append(Line(text, language, SEED_BASE + len(lines)))
    return lines


@dataclass
class CheckProgress:
    """Where a check is: ``done`` of ``total`` steps (renders, then scores), the mode being rendered."""

    done: int = 0
    total: int = 0
    step: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "step": self.step}


@dataclass(frozen=True)
class Judge:
    """The speaker judge: its name (``campplus`` / ``d-vector``), embedding function, and ``note``
    (``{"code", "message"}``) when the model's campplus could not be used and the d-vector stands in."""

    name: str
    embed: mode_scores.Embed
    note: dict[str, str] | None = None


#: The record's note when the model's campplus could not be used and the d-vector judged instead.
JUDGE_FALLBACK = "mode_check_judge_fallback"
#: A campplus that fails to open or to embed a probe (1 s of a 200 Hz tone at this rate) is not used.
_PROBE_RATE = 16000


def engine_modes(engine: Engine) -> tuple[str, ...]:
    """The engine's quality modes, exact first; a coded refusal when it has no other mode."""
    modes = tuple(engine.capabilities.quality_modes)
    if EXACT not in modes or len(modes) < 2:
        raise InputError(f"the {engine.name} engine has no speed modes to check (quality modes: "
                         f"{', '.join(modes) or 'none'})", code="mode_check_no_modes", engine=engine.name)
    return (EXACT,) + tuple(mode for mode in modes if mode != EXACT)


def judge_of(engine: Engine) -> Judge:
    """The model's own campplus where the engine offers one, else the project's d-vector. A campplus
    that fails to open or to embed a probe (a damaged or foreign ``campplus.onnx``, one the manifest
    does not list) does not fail the check: the d-vector judges, and the record says why."""
    own = getattr(engine, "speaker_judge", None)
    note = None
    if callable(own):
        try:
            embed = own()
            if embed is not None:
                probe = (0.1 * np.sin(2 * np.pi * 200 * np.arange(_PROBE_RATE) / _PROBE_RATE)).astype(np.float32)
                vector = np.asarray(embed(probe, _PROBE_RATE), dtype=np.float32).reshape(-1)
                if vector.size == 0 or not np.isfinite(vector).all():
                    raise ValueError(f"it gave {vector.size} values, not all finite")
                return Judge(mode_scores.JUDGE_CAMPPLUS, embed)
        except Exception as exc:  # any failure of the model's own encoder: the d-vector stands in
            reason = exc.message if isinstance(exc, CosyedgeError) else f"{type(exc).__name__}: {exc}"
            logger.warning("mode check: the model's campplus cannot judge (%s); the d-vector does", reason)
            note = {"code": JUDGE_FALLBACK,
                    "message": f"the model's campplus.onnx could not be used ({reason}); judged by the d-vector"}
    from cosyedge.listening.speaker import shared_encoder

    return Judge(mode_scores.JUDGE_DVECTOR, shared_encoder().embed, note)


def _render(engine: Engine, line: Line, voice: str | VoicePrompt, mode: str, gate: Gate) -> Rendition:
    """One line in one mode; a render the gate interrupts is dropped and done again once it may."""
    stream = bool(getattr(getattr(engine, "token2wav", None), "can_stream", False))
    options = SynthesisOptions(language=line.language, seed=line.seed, quality=mode, stream=stream)
    while True:
        gate.wait()
        try:
            result = render(engine, line.text, voice, options, cancelled=gate.interrupted)
        except CancelledError:
            gate.wait()  # raises when the check itself was cancelled
            logger.debug("mode check: render of %r (%s) gave way to a user's job", line.text, mode)
            continue
        return Rendition(line.text, line.language, result.audio.astype(np.float32), result.sample_rate)


def run_check(engine: Engine, voice: str | VoicePrompt, check_voice: CheckVoice, *, judge: Judge,
              hear: Hear | None, gate: Gate, progress: CheckProgress | None = None,
              per_language: int | None = None, languages: Sequence[str] | None = None,
              thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Render, score and judge every mode of ``engine`` with ``voice``; the record to store.
    ``languages`` (default: every language of the set the engine speaks) and ``per_language``
    (default: every line) make a shorter check."""
    progress = progress or CheckProgress()
    thresholds = thresholds or Thresholds()
    modes = engine_modes(engine)
    spoken = set(engine.capabilities.languages) & set(languages if languages is not None else all_lines())
    lines = check_lines([lang for lang in all_lines() if lang in spoken], per_language)
    if not lines:
        raise InputError(f"the {engine.name} engine speaks none of the check's languages",
                         code="mode_check_no_modes", engine=engine.name)
    progress.total = len(modes) * len(lines) * 2
    started = time.monotonic()
    renditions: dict[str, list[Rendition]] = {}
    seconds: dict[str, float] = {}
    for mode in modes:
        began = time.monotonic()
        progress.step = f"rendering {mode}"
        renditions[mode] = []
        for line in lines:
            renditions[mode].append(_render(engine, line, voice, mode, gate))
            progress.done += 1
        seconds[mode] = round(time.monotonic() - began, 2)
    results: dict[str, Any] = {}
    for mode in modes:
        progress.step = f"scoring {mode}"
        for rendition in renditions[mode]:
            gate.wait()
            mode_scores.embed_line(rendition, judge.embed)
            mode_scores.hear_line(rendition, hear)
            progress.done += 1
        if mode == EXACT:
            continue
        figures = mode_scores.compare(renditions[EXACT], renditions[mode], judge.embed, hear)
        verdict = thresholds.judge(figures, judge.name)
        results[mode] = {"figures": figures.as_dict(), "verdict": verdict.as_dict(),
                         "render_seconds": seconds[mode]}
    exact_heard = [r.heard for r in renditions[EXACT] if r.heard is not None]
    return {
        "finished": today(),
        "model": engine.model_id,
        "engine": engine.name,
        "voice": check_voice.as_dict(),
        "judge": judge.name,
        "notes": [judge.note] if judge.note else [],
        "thresholds": thresholds.as_dict(),
        "versions": {"cosyedge": __version__, "recognizer": _recognizer_id(hear), "lines": lines_digest()},
        "languages": sorted({line.language for line in lines}),
        "lines": len(lines),
        "seeds": [line.seed for line in lines],
        "exact": {"render_seconds": seconds[EXACT],
                  "audio_seconds": round(sum(r.seconds for r in renditions[EXACT]), 2),
                  "heard_errors": sum(h.errors for h in exact_heard), "units": sum(h.units for h in exact_heard)},
        "modes": results,
        "seconds": round(time.monotonic() - started, 1),
    }


def _recognizer_id(hear: Hear | None) -> str | None:
    if hear is None:
        return None
    from cosyedge.listening.asr import MODEL_ID

    return MODEL_ID
