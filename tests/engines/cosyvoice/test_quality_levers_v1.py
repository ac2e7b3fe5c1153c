"""Each ``quality`` mode's levers reach CosyVoice-300M's graphs, on the tiny converted SFT model (no torch).

What applies on v1: the flow steps and the CFG schedule (each estimator call's batch: 2 rows with
CFG, 1 without), whole and streamed, and a streamed answer's first hop (the tokens the first flow
call reads: the SFT preset has no prompt tokens, so it reads the hop and the 20 overlap tokens).
The bounded left context does not: v1's flow is not chunk-causal. ``exact`` runs as before. Random
weights: these tests check what ran, not how it sounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.quality import QUALITY_NAMES, Levers, levers_for
from cosyedge.engines.cosyvoice.v1.token2wav import (HIFT_CACHE_FRAMES, MEL_OVERLAP, TOKEN_OVERLAP,
                                                     shortest_first_hop, target_frames)
from cosyedge.engines.loader import load_engine
from tests.helpers.hop_gate import LONG_V1_SENTENCE as TEXT

pytestmark = pytest.mark.slow  # loads the tiny model

MODEL = "cosyvoice1-sft-tiny"
SPEAKER = "中文女"
#: Upstream's first v1 hop (2 s of 50 Hz tokens).
UPSTREAM_HOP = 100


class Spy:
    """An onnxruntime session stand-in recording ``measure(feeds)`` of each call."""

    def __init__(self, session, measure) -> None:  # noqa: ANN001
        self.session, self.measure, self.calls = session, measure, []

    def run(self, names, feeds):  # noqa: ANN001
        self.calls.append(self.measure(feeds))
        return self.session.run(names, feeds)

    def get_inputs(self):  # noqa: ANN201
        return self.session.get_inputs()


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = load_engine(Settings(models_dir=tiny_cosyvoice_models, model=MODEL, onnx_threads=1))
    yield eng
    eng.close()


@pytest.fixture
def spies(engine):
    """(encoder spy: tokens read per call, estimator spy: batch per call)."""
    flow = engine.token2wav.flow
    encoder, estimator = flow.encoder_session, flow.cfm.estimator_session
    spy_encoder = Spy(encoder, lambda feeds: feeds["tokens"].shape[1])
    spy_estimator = Spy(estimator, lambda feeds: feeds["x"].shape[0])
    flow.encoder_session, flow.cfm.estimator_session = spy_encoder, spy_estimator
    yield spy_encoder, spy_estimator
    flow.encoder_session, flow.cfm.estimator_session = encoder, estimator


def _speak(engine, quality: str | None, stream: bool, flow_steps: int | None = None) -> list:
    options = SynthesisOptions(seed=3, stream=stream, quality=quality, n_timesteps=flow_steps)
    return list(engine.synthesize(TEXT, SPEAKER, options))


def _batches(calls: list, steps: int) -> list[int]:
    """The batch of each Euler step, checked to be the same in every flow call (sentence or hop)."""
    assert calls and len(calls) % steps == 0
    rows = [calls[i:i + steps] for i in range(0, len(calls), steps)]
    assert all(row == rows[0] for row in rows), rows
    return rows[0]


def test_v1_offers_the_modes_and_applies_steps_cfg_and_first_hop_in_its_own_tokens(engine):
    assert engine.capabilities.quality_modes == QUALITY_NAMES
    assert engine.quality_levers(None) == engine.quality_levers("exact") == Levers()
    live, balanced = engine.quality_levers("live"), engine.quality_levers("balanced")
    # The modes' first hops are 10 and 15 tokens at 25 a second (0.4 and 0.6 s): 20 and 30 of v1's 50.
    assert (live.steps, live.guided_steps, live.left_chunks, live.first_hop_tokens) == (4, 0, 0, 20)
    assert (balanced.steps, balanced.guided_steps, balanced.left_chunks, balanced.first_hop_tokens) == (6, 2, 0, 30)
    assert engine.quality_levers("live", flow_steps=7).flow_steps == 7
    assert set(engine.inapplicable_levers) == {"left_chunks"}
    assert "not chunk-causal" in engine.inapplicable_levers["left_chunks"]
    # The shortest first hop still yields audio past the faded and held-back frames.
    shortest = shortest_first_hop()
    assert target_frames(shortest + TOKEN_OVERLAP) - MEL_OVERLAP - HIFT_CACHE_FRAMES >= 1
    assert target_frames(shortest - 1 + TOKEN_OVERLAP) - MEL_OVERLAP - HIFT_CACHE_FRAMES < 1
    assert engine.token2wav.first_hop(5) == shortest and engine.token2wav.first_hop(0) == 0


@pytest.mark.parametrize("quality", QUALITY_NAMES)
def test_whole_sentences_run_the_modes_steps_and_cfg(engine, spies, quality):
    _, spy_estimator = spies
    chunks = _speak(engine, quality, stream=False)
    levers = levers_for(quality)
    assert len(chunks) == 1 and chunks[0].audio.size
    assert _batches(spy_estimator.calls, levers.steps) == ([2] * levers.guided_steps
                                                           + [1] * (levers.steps - levers.guided_steps))


@pytest.mark.parametrize("quality", QUALITY_NAMES)
def test_streams_run_the_modes_steps_cfg_and_first_hop(engine, spies, quality):
    spy_encoder, spy_estimator = spies
    chunks = _speak(engine, quality, stream=True)
    levers = engine.quality_levers(quality)
    assert len(chunks) >= 2 and len(spy_encoder.calls) == len(chunks)
    assert _batches(spy_estimator.calls, levers.steps) == ([2] * levers.guided_steps
                                                           + [1] * (levers.steps - levers.guided_steps))
    first = levers.first_hop_tokens or UPSTREAM_HOP
    assert spy_encoder.calls[0] == first + TOKEN_OVERLAP
    assert chunks[0].audio.size == (target_frames(first + TOKEN_OVERLAP) - MEL_OVERLAP - HIFT_CACHE_FRAMES) * 256
    # the hops after the first keep upstream's schedule
    assert all(tokens == UPSTREAM_HOP + TOKEN_OVERLAP for tokens in spy_encoder.calls[1:-1])


def test_a_requests_flow_steps_win_over_the_modes_and_its_cfg_schedule_stays(engine, spies):
    _, spy_estimator = spies
    _speak(engine, "balanced", stream=False, flow_steps=7)
    assert _batches(spy_estimator.calls, 7) == [2, 2, 1, 1, 1, 1, 1]


def test_exact_mode_runs_as_upstream(engine, spies):
    """Named or not, exact is the same call as before the modes: every step guided, upstream's hops,
    the same draws (the fingerprint, scripts/fingerprint_outputs.py --part cosyvoice1, holds it
    across the change)."""
    _, spy_estimator = spies
    for stream in (False, True):
        reference = [c.audio for c in _speak(engine, None, stream)]
        named = [c.audio for c in _speak(engine, "exact", stream)]
        assert len(reference) == len(named) and all(np.array_equal(a, b) for a, b in zip(reference, named))
    assert set(spy_estimator.calls) == {2} and len(spy_estimator.calls) % 10 == 0
