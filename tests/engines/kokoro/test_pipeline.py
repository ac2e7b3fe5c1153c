"""Two Kokoro calls in flight: order, the engine-wide run limit, cancellation and errors.

The engine runs on a scripted fake session whose calls sleep for a chosen time per sentence (the
work) and, where a test needs an order, wait for another call to start or end, so calls really
overlap and finish out of order; the real model's output is compared with sequential synthesis in
tests/engines/kokoro/test_real_model.py.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.engines.kokoro.pipeline import Abandoned, Overlap, RunSlots, Ticket
from cosyedge.errors import CancelledError, EngineError
from tests.helpers.tiny_kokoro import Sentence
from tests.helpers.waiting import wait_until

PACK = np.zeros((510, 1, 256), dtype=np.float32)
#: How long a scripted call waits for the call it is ordered after: long enough never to matter
#: when the pipeline behaves, short enough that a pipeline that does not overlap fails the test.
ORDER_TIMEOUT_S = 5.0


class NumberedFrontend:
    """Text "5 3 8" -> three sentences of 5, 3 and 8 phonemes; sentence i's ids are all i + 1."""

    def sentences(self, text: str, language: str = "auto") -> list[Sentence]:
        return [Sentence(f"s{i}", f"{i}:{n}") for i, n in enumerate(text.split())]

    def token_ids(self, phonemes: str) -> list[int]:
        index, length = phonemes.split(":")
        return [int(index) + 1] * int(length)

    def close(self) -> None:
        pass


class ScriptedSession:
    """Each call sleeps ``delays[sentence]`` (default ``delay``), then, if ``after[sentence]`` is
    ``(kind, other)``, waits until call ``other`` has had its ``kind`` ("start" or "end") event;
    it may fail, and is recorded."""

    def __init__(self, delays: dict[int, float] | None = None, delay: float = 0.02,
                 fail: tuple[int, ...] = (), on_end: dict[int, Callable[[], object]] | None = None,
                 samples_per_token: int = 2400, after: dict[int, tuple[str, int]] | None = None) -> None:
        self.samples_per_token = samples_per_token  # 0.1 s of audio per phoneme: far ahead of the calls
        self.delays = delays or {}
        self.delay = delay
        self.fail = fail
        self.on_end = on_end or {}
        self.after = after or {}
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.events: list[tuple[str, int, float]] = []  # ("start" | "end", sentence, time)
        self.seen: dict[tuple[str, int], threading.Event] = {}

    def _seen(self, kind: str, sentence: int) -> threading.Event:
        with self.lock:
            return self.seen.setdefault((kind, sentence), threading.Event())

    def _record(self, kind: str, sentence: int) -> None:
        with self.lock:
            self.events.append((kind, sentence, time.monotonic()))
        self._seen(kind, sentence).set()

    def run(self, output_names, feeds):
        tokens = feeds["tokens"][0, 1:-1]
        sentence = int(tokens[0]) - 1
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self._record("start", sentence)
        try:
            time.sleep(self.delays.get(sentence, self.delay))
            if sentence in self.after:
                self._seen(*self.after[sentence]).wait(ORDER_TIMEOUT_S)
            if sentence in self.on_end:
                self.on_end[sentence]()
            if sentence in self.fail:
                raise EngineError(f"sentence {sentence} failed")
            return [np.full(self.samples_per_token * tokens.size, 0.01 * (sentence + 1), dtype=np.float32)]
        finally:
            with self.lock:
                self.active -= 1
            self._record("end", sentence)

    def order(self, kind: str) -> list[int]:
        return [s for k, s, _ in self.events if k == kind]

    def at(self, kind: str, sentence: int) -> float:
        return next(t for k, s, t in self.events if k == kind and s == sentence)


def make_engine(session: ScriptedSession, **kwargs) -> KokoroEngine:
    return KokoroEngine(session=session, packs={"jf_alpha": PACK}, frontend=NumberedFrontend(), **kwargs)


def levels(chunks) -> list[float]:
    """Each chunk's constant level, which names the sentence that made it."""
    return [round(float(c.audio[0]), 3) for c in chunks]


def synth(engine: KokoroEngine, text: str, **kwargs):
    return engine.synthesize(text, "female_1", SynthesisOptions(), **kwargs)


def test_chunks_come_in_order_when_calls_finish_out_of_order():
    session = ScriptedSession(after={1: ("end", 2)})
    progress = []
    chunks = list(synth(make_engine(session), "5 5 5 5", progress=lambda d, t: progress.append((d, t))))
    assert session.order("end")[:3] == [0, 2, 1]  # the look-ahead call finished first ...
    assert [c.index for c in chunks] == [0, 1, 2, 3]  # ... and still came out second
    assert levels(chunks) == [0.01, 0.02, 0.03, 0.04]
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert session.max_active == 2


def test_first_call_runs_alone_unless_the_policy_overlaps_it():
    alone = ScriptedSession(delay=0.05, after={1: ("start", 2)})
    list(synth(make_engine(alone), "5 5 5"))
    assert alone.at("start", 1) >= alone.at("end", 0)
    assert alone.at("start", 2) < alone.at("end", 1)  # from the second call on, two in flight

    together = ScriptedSession(delay=0.05, after={0: ("start", 1)})
    list(synth(make_engine(together, overlap=Overlap(first=True)), "5 5 5"))
    assert together.at("start", 1) < together.at("end", 0)


def test_guard_looks_ahead_only_while_the_audio_ahead_covers_the_next_call():
    # 5 phonemes -> 5 samples of audio per 20 ms call: the player would starve, so no look-ahead
    starved = ScriptedSession(delay=0.02, samples_per_token=1)
    chunks = list(synth(make_engine(starved, overlap=Overlap(guard=2.0)), "5 5 5 5"))
    assert starved.max_active == 1 and levels(chunks) == [0.01, 0.02, 0.03, 0.04]
    # 0.5 s of audio per 20 ms call: plenty ahead, so two in flight from the second call on
    ahead = ScriptedSession(delay=0.02, after={1: ("start", 2)})
    list(synth(make_engine(ahead, overlap=Overlap(guard=2.0)), "5 5 5 5"))
    assert ahead.max_active == 2
    assert ahead.at("start", 1) >= ahead.at("end", 0)


def test_one_run_at_once_is_sequential():
    session = ScriptedSession(delay=0.02)
    chunks = list(synth(make_engine(session, parallel_runs=1, overlap=Overlap(first=True)), "5 5 5 5"))
    assert session.max_active == 1
    assert levels(chunks) == [0.01, 0.02, 0.03, 0.04]


def test_two_jobs_never_run_more_than_the_engine_limit():
    session = ScriptedSession(delay=0.03)
    engine = make_engine(session)
    results: dict[str, list] = {}

    def job(name: str) -> None:
        results[name] = levels(synth(engine, "5 5 5 5 5 5"))

    threads = [threading.Thread(target=job, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {"a": [0.01, 0.02, 0.03, 0.04, 0.05, 0.06], "b": [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]}
    assert session.max_active == 2 and engine.runs.peak == 2
    assert engine.runs.running == 0


def test_cancel_mid_pipeline_stops_launching_and_leaves_no_run_behind():
    stop = threading.Event()
    # the job is cancelled while calls 1 and 2 run (at the end of call 1)
    session = ScriptedSession(delay=0.1, delays={2: 0.3}, on_end={1: stop.set})
    engine = make_engine(session)
    gen = synth(engine, "5 5 5 5 5 5", cancelled=stop.is_set)
    assert next(gen).index == 0
    assert next(gen).index == 1  # made before the cancel: still handed out
    time.sleep(0.05)  # the consumer takes a moment: a launch now would have started
    with pytest.raises(CancelledError):
        next(gen)
    assert session.active == 0 and engine.runs.running == 0  # call 2 was waited for, not left behind
    assert session.order("start") == [0, 1, 2]  # nothing launched after the cancel
    time.sleep(0.15)
    assert session.order("start") == [0, 1, 2]


def test_closing_the_stream_waits_for_its_calls():
    session = ScriptedSession(delay=0.1)
    engine = make_engine(session)
    gen = synth(engine, "5 5 5 5 5 5")
    next(gen)
    next(gen)
    gen.close()  # e.g. the client went away
    assert session.active == 0 and engine.runs.running == 0
    assert len(session.order("start")) <= 4


def test_error_in_the_second_call_is_raised_in_its_place():
    session = ScriptedSession(fail=(1,), delay=0.02)
    engine = make_engine(session)
    gen = synth(engine, "5 5 5 5")
    assert next(gen).index == 0
    with pytest.raises(EngineError, match="sentence 1 failed"):
        next(gen)
    assert session.active == 0 and engine.runs.running == 0


def test_error_in_a_look_ahead_call_waits_for_the_chunks_before_it():
    # call 2 fails at once while call 1 is still running: chunks 0 and 1 come out first
    session = ScriptedSession(delays={2: 0.0}, fail=(2,), after={1: ("end", 2)})
    gen = synth(make_engine(session), "5 5 5 5")
    assert next(gen).index == 0
    assert next(gen).index == 1
    assert session.at("end", 2) < session.at("end", 1)
    with pytest.raises(EngineError, match="sentence 2 failed"):
        next(gen)


def test_look_ahead_respects_the_memory_budget():
    # two 300-phoneme calls exceed a 510 budget together: no overlap; short ones do overlap
    long = ScriptedSession(delay=0.03)
    list(synth(make_engine(long), "300 300 300 300"))
    assert long.max_active == 1
    short = ScriptedSession(delay=0.03, after={1: ("start", 2)})
    list(synth(make_engine(short), "200 200 200 200"))
    assert short.max_active == 2


# --- RunSlots on its own --------------------------------------------------------------------------


def _start(slots: RunSlots, ticket: Ticket, started: list, release: threading.Event) -> threading.Thread:
    def hold() -> None:
        try:
            with slots.hold(ticket):
                started.append(ticket)
                release.wait(5)
        except Abandoned:
            started.append("abandoned")

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_urgent_call_is_served_before_an_earlier_look_ahead():
    slots = RunSlots(1, budget=1000)
    started: list = []
    gates = [threading.Event() for _ in range(3)]
    first = Ticket(1, urgent=True)
    look_ahead, urgent = Ticket(1), Ticket(1, urgent=True)
    threads = [_start(slots, first, started, gates[0])]
    wait_until(lambda: started == [first])
    threads.append(_start(slots, look_ahead, started, gates[1]))
    wait_until(lambda: slots.waiting == 1)  # the look-ahead is waiting first
    threads.append(_start(slots, urgent, started, gates[2]))
    wait_until(lambda: slots.waiting == 2)
    gates[0].set()
    wait_until(lambda: len(started) == 2)
    assert started[1] is urgent
    gates[2].set()
    wait_until(lambda: len(started) == 3)
    assert started[2] is look_ahead
    gates[1].set()
    for t in threads:
        t.join(2)
    assert slots.running == 0 and slots.peak == 1


def test_budget_holds_back_look_ahead_but_not_urgent_calls():
    slots = RunSlots(2, budget=10)
    started: list = []
    gates = [threading.Event() for _ in range(3)]
    big = Ticket(8, urgent=True)
    threads = [_start(slots, big, started, gates[0])]
    wait_until(lambda: started == [big])
    waiting = Ticket(5)
    threads.append(_start(slots, waiting, started, gates[1]))
    wait_until(lambda: slots.waiting == 1)
    assert started == [big]  # 8 + 5 > 10
    gates[0].set()
    wait_until(lambda: len(started) == 2)
    assert started[1] is waiting
    urgent = Ticket(8, urgent=True)
    threads.append(_start(slots, urgent, started, gates[2]))
    wait_until(lambda: len(started) == 3)  # 5 + 8 > 10, but urgent calls are not budgeted
    for gate in gates:
        gate.set()
    for t in threads:
        t.join(2)
    assert slots.running == 0


def test_abandoned_ticket_never_runs():
    slots = RunSlots(1, budget=1000)
    started: list = []
    gates = [threading.Event(), threading.Event()]
    first, queued = Ticket(1, urgent=True), Ticket(1)
    threads = [_start(slots, first, started, gates[0])]
    wait_until(lambda: started == [first])
    threads.append(_start(slots, queued, started, gates[1]))
    wait_until(lambda: slots.waiting == 1)
    slots.abandon(queued)
    wait_until(lambda: len(started) == 2)
    assert started[1] == "abandoned"
    gates[0].set()
    for t in threads:
        t.join(2)
    assert slots.running == 0 and slots.peak == 1
