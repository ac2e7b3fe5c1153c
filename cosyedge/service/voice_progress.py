"""How far a request's voice is prepared: hearing its transcript, then the engine's encoding steps.

A CosyVoice prompt's encoding (opening the prompt encoders, speech tokens, prompt mel, speaker
embedding; before them the transcript heard offline) takes seconds to tens of seconds on two cores,
and the page's bar sat at 0 % and a streamed answer said nothing meanwhile. :class:`VoicePreparation`
counts the steps as they start and, once the preparation has taken or is expected to take
:data:`REPORT_AFTER_S`, says them as the job's phase: a :class:`~cosyedge.notes.Note` (code
``voice_preparing``: step, total, stage, seconds left) that ``/jobs/{id}`` shows and the page turns
into its bar. The time left comes from how long this engine's earlier preparations took per step
(:class:`PreparationTimes`), else from the pace of the steps done so far. The answer then
carries a ``voice_prepared`` note (the steps and the seconds), also in a streamed answer's report
header, so a client knows why its first audio came late.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import Callable

from cosyedge.notes import Note
from cosyedge.service.requests import PHASE_TRANSCRIBING

#: A preparation shorter than this (the embedded engine's closest voice: about a second) says no steps.
REPORT_AFTER_S = 2.0
#: The step codes in words (``StepFn`` stages; "hearing" is the service's own).
STAGE_WORDS = {"hearing": "hearing its transcript", "encoders": "opening the prompt encoders",
               "tokens": "speech tokens", "mel": "prompt mel", "speaker": "speaker embedding"}


class PreparationTimes:
    """How long an engine's preparation steps took lately, per step (the last 5 preparations)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._per_step: dict[str, deque[float]] = {}

    def expected(self, engine: str, steps: int) -> float | None:
        """Seconds a preparation of ``steps`` steps should take on ``engine``; None before any."""
        with self._lock:
            seen = self._per_step.get(engine)
            return statistics.median(seen) * steps if seen else None

    def record(self, engine: str, steps: int, seconds: float) -> None:
        with self._lock:
            self._per_step.setdefault(engine, deque(maxlen=5)).append(seconds / max(1, steps))


class VoicePreparation:
    """One request's voice preparation. ``phase`` is the job's (it hears PHASE_TRANSCRIBING from the
    transcriber, which counts as the step "hearing"); ``expected_steps`` the steps it will likely
    take (the engine's ``prompt_steps`` and, for a clone that must be heard, one more)."""

    def __init__(self, phase: Callable[[str], None], times: PreparationTimes, engine: str,
                 engine_steps: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._phase = phase
        self._times = times
        self._engine = engine
        self._engine_steps = engine_steps
        self._clock = clock
        self._started = clock()
        self._heard = 0  # steps of the service's own before the engine's (hearing)
        self._step = 0
        self._total = engine_steps

    def phase(self, phase: str) -> None:
        """The job's phase, with hearing counted as a step."""
        if phase == PHASE_TRANSCRIBING:
            self._heard = 1
            self._total = 1 + self._engine_steps
            self._say(1, "hearing", fallback=phase)
        else:
            self._phase(phase)

    def engine_step(self, step: int, total: int, stage: str) -> None:
        """The engine's ``StepFn``: step ``step`` of its ``total`` starts."""
        self._total = self._heard + total
        self._say(self._heard + step, stage, fallback=None)

    def _say(self, step: int, stage: str, fallback: str | None) -> None:
        self._step = step
        elapsed = self._clock() - self._started
        expected = self._times.expected(self._engine, self._total)
        if elapsed < REPORT_AFTER_S and (expected is None or expected < REPORT_AFTER_S):
            if fallback is not None:
                self._phase(fallback)
            return
        if expected is not None:
            left: float | None = max(0.0, expected - elapsed)
        elif step > 1:
            left = elapsed / (step - 1) * (self._total - step + 1)
        else:
            left = None
        self._phase(progress_note(step, self._total, stage, left))

    def finish(self) -> Note | None:
        """Record how long it took; the answer's note when it took :data:`REPORT_AFTER_S` or more."""
        seconds = self._clock() - self._started
        if not self._step:
            return None  # nothing was encoded or heard (the prompt cache had it)
        self._times.record(self._engine, self._total, seconds)
        if seconds < REPORT_AFTER_S:
            return None
        return Note(f"the voice was prepared first: {self._step} step{'s' if self._step != 1 else ''} in "
                    f"{seconds:.1f} s (its encoding is kept: the next answer in this voice starts sooner)",
                    code="voice_prepared", steps=self._step, seconds=round(seconds, 1))


def progress_note(step: int, total: int, stage: str, seconds_left: float | None) -> Note:
    """The job's phase while a voice is prepared: "preparing the voice: step 2 of 4 (speech tokens),
    about 6 s left"."""
    left = "estimating the time left" if seconds_left is None else f"about {round(seconds_left)} s left"
    return Note(f"preparing the voice: step {step} of {total} ({STAGE_WORDS.get(stage, stage)}), {left}",
                code="voice_preparing", step=step, total=total, stage=stage,
                seconds_left=None if seconds_left is None else round(seconds_left))
