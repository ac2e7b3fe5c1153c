"""Each ``quality`` mode's levers reach the flow's graphs, on the tiny converted model (no torch).

Spies stand in for the estimator sessions (whole-sentence and chunk-step) and record every call:
its batch (2 rows with CFG, 1 without), its frames and how many earlier frames it attends to. Random
weights: the audio is noise, so these tests check what was run, not how it sounds (the deviation
figures are in docs/models.md, "Quality modes").
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.quality import MODES, QUALITY_NAMES, Levers, levers_for
from cosyedge.engines.loader import load_engine
from cosyedge.errors import ParameterError
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES, open_tiny_engine, sine_prompt

pytestmark = pytest.mark.slow  # loads the tiny model

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")


class Spy:
    """An onnxruntime session stand-in recording (batch, frames, past frames) of each estimator call."""

    def __init__(self, session) -> None:
        self.session, self.calls = session, []

    def run(self, names, feeds):  # noqa: ANN001
        past = feeds["key_0"].shape[0] * feeds["key_0"].shape[3] if "key_0" in feeds else \
            feeds["kv"].shape[0] if "kv" in feeds else 0
        self.calls.append((feeds["x"].shape[0], feeds["x"].shape[2], past))
        return self.session.run(names, feeds)

    def get_inputs(self):  # noqa: ANN201
        return self.session.get_inputs()


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = open_tiny_engine(tiny_cosyvoice_models)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompt(engine):
    return sine_prompt(engine, 4.0)


@pytest.fixture
def spies(engine):
    flow = engine.token2wav.flow
    whole, (encoder, step) = flow.estimator_session, flow.stream_sessions
    spy_whole, spy_step = Spy(whole), Spy(step)
    flow.estimator_session, flow.stream_sessions = spy_whole, (encoder, spy_step)
    flow.prompt_states.clear()
    yield spy_whole, spy_step
    flow.estimator_session, flow.stream_sessions = whole, (encoder, step)


def _speak(engine, voice, quality: str | None, stream: bool, flow_steps: int | None = None) -> list:
    options = SynthesisOptions(seed=3, stream=stream, quality=quality, n_timesteps=flow_steps)
    return list(engine.synthesize(TEXT, voice, options))


def _batches(calls: list, steps: int) -> list[int]:
    """The batch of each Euler step, checked to be the same in every chunk (or sentence)."""
    assert len(calls) % steps == 0
    rows = [calls[i:i + steps] for i in range(0, len(calls), steps)]
    batches = [[call[0] for call in row] for row in rows]
    assert all(b == batches[0] for b in batches), batches
    return batches[0]


def test_every_mode_is_in_range_and_exact_is_upstream():
    for mode in MODES.values():
        assert mode.levers.check() is mode.levers
    assert QUALITY_NAMES[0] == "exact" and MODES["exact"].levers == Levers()
    assert levers_for(None) == Levers() and levers_for("exact").changed() == ()
    assert set(levers_for("live").changed()) == {"flow_steps", "cfg_steps", "left_chunks", "first_hop_tokens"}
    assert levers_for("live", flow_steps=7).flow_steps == 7  # an explicit count wins over the mode's


@pytest.mark.parametrize("name,levers,code", [
    ("fastest", None, "quality_unknown"), ("exact", Levers(flow_steps=11), "flow_steps_out_of_range"),
    ("exact", Levers(cfg_steps=-1), "quality_lever_out_of_range"),
    ("exact", Levers(left_chunks=61), "quality_lever_out_of_range"),
    ("exact", Levers(first_hop_tokens=3), "quality_lever_out_of_range")])
def test_an_unknown_mode_or_a_lever_out_of_range_is_refused_by_name(name, levers, code):
    with pytest.raises(ParameterError) as refused:
        levers_for(name) if levers is None else levers.check()
    assert refused.value.code == code
    if code == "quality_unknown":
        assert refused.value.params["choices"] == QUALITY_NAMES and "exact, balanced, live" in refused.value.message


@pytest.mark.parametrize("quality", QUALITY_NAMES)
def test_whole_sentences_run_the_modes_steps_and_cfg(engine, spies, quality):
    spy_whole, spy_step = spies
    _speak(engine, PRESET_NAMES[0], quality, stream=False)
    levers = levers_for(quality)
    assert not spy_step.calls
    batches = _batches(spy_whole.calls, levers.steps)
    assert batches == [2] * levers.guided_steps + [1] * (levers.steps - levers.guided_steps)


@pytest.mark.parametrize("quality", QUALITY_NAMES)
def test_streams_run_the_modes_levers(engine, spies, prompt, quality):
    spy_whole, spy_step = spies
    chunks = _speak(engine, prompt, quality, stream=True)
    levers = levers_for(quality)
    assert not spy_whole.calls and len(chunks) >= 3
    batches = _batches(spy_step.calls, levers.steps)
    assert batches == [2] * levers.guided_steps + [1] * (levers.steps - levers.guided_steps)
    past = [call[2] for call in spy_step.calls]
    if levers.left_chunks:
        assert max(past) == 50 * levers.left_chunks  # the bound is reached, never passed
    else:
        assert past == sorted(past) and max(past) > 50 * 4
    first_hop_frames = chunks[0].audio.size // 480 + 8  # HiFT holds back 8 frames of a hop
    if levers.first_hop_tokens:
        assert first_hop_frames == 2 * levers.first_hop_tokens
        # the short hop's partial chunk is rendered beside the chunk calls: one Euler pass more
        assert any(frames < 50 for _, frames, _ in spy_step.calls[:-levers.steps])
    else:
        assert first_hop_frames >= 50  # upstream: 25 tokens + the prompt's padding


def test_a_mode_keeps_its_own_prompt_state(engine, spies, prompt):
    """The voice's prompt state is kept per setting of the levers: a live sentence after an exact
    one recomputes the prompt's chunks with its own levers, and a second live sentence reuses them."""
    _, spy_step = spies
    counts = []
    for quality in ("exact", "live", "live"):
        spy_step.calls.clear()
        _speak(engine, prompt, quality, stream=True)
        counts.append(len(spy_step.calls) // levers_for(quality).steps)
    assert counts[1] > counts[2]  # the second live sentence starts from the kept prompt state


def test_bounded_streams_repeat_exactly_from_the_kept_prompt_state(engine, prompt):
    engine.token2wav.flow.prompt_states.clear()
    first = np.concatenate([c.audio for c in _speak(engine, prompt, "balanced", stream=True)])
    again = np.concatenate([c.audio for c in _speak(engine, prompt, "balanced", stream=True)])
    np.testing.assert_array_equal(first, again)


def test_flow_steps_win_over_the_modes_steps(engine, spies):
    spy_whole, _ = spies
    _speak(engine, PRESET_NAMES[0], "live", stream=False, flow_steps=3)
    assert [call[0] for call in spy_whole.calls] == [1, 1, 1]  # live's CFG schedule (none), 3 steps


def test_exact_mode_runs_as_upstream(engine, spies, prompt):
    spy_whole, spy_step = spies
    reference = [c.audio for c in _speak(engine, prompt, None, stream=True)]
    named = [c.audio for c in _speak(engine, prompt, "exact", stream=True)]
    assert all(np.array_equal(a, b) for a, b in zip(reference, named)) and len(reference) == len(named)
    assert {call[0] for call in spy_step.calls} == {2} and len(spy_step.calls) % 10 == 0


def test_cosyvoice3_takes_the_steps_and_cfg_of_a_mode(tiny_cosyvoice3_models):
    """CosyVoice3 does not stream yet: its DiT estimator takes a mode's steps and CFG schedule (batch 1
    on the unguided steps) and the levers of streaming are left out of what it applies."""
    from tests.helpers.cosyvoice3_fixture import MODEL_IDS

    engine = load_engine(Settings(models_dir=tiny_cosyvoice3_models, model=MODEL_IDS["int8"], onnx_threads=1,
                                  thread_calibration=False))
    try:
        levers = engine.quality_levers("balanced")
        assert (levers.steps, levers.guided_steps, levers.left_chunks, levers.first_hop_tokens) == (6, 2, 0, 0)
        spy = Spy(engine.token2wav.flow.estimator_session)
        engine.token2wav.flow.estimator_session = spy
        chunks = list(engine.synthesize("Hello world.", engine.presets()[0] if engine.presets() else
                                        _voice3(engine), SynthesisOptions(seed=1, stream=True, quality="balanced")))
        assert chunks and _batches(spy.calls, 6) == [2, 2, 1, 1, 1, 1]
    finally:
        engine.close()


def _voice3(engine):
    t = np.arange(3 * 16000) / 16000
    return engine.encode_prompt((0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), 16000, "Hello world.")
