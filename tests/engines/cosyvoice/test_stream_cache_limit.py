"""The streamed flow's memory budget on the tiny converted model (no torch).

Past ``cache_budget`` bytes of predicted flow cache a streamed sentence stops streaming and is
rendered whole at its end; the audio then is the hops already sent followed by the whole render from
the next sample on: as long as the sentence, nothing sent twice, nothing missing.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from tests.helpers.tiny_models import MODEL_ID, open_tiny_engine, sine_prompt

pytestmark = pytest.mark.slow  # loads the tiny model

N_PROMPT, N_TOKENS, STEPS = 60, 120, 4   # first hop: 25 + 15 padding tokens, sent at 43 tokens


@pytest.fixture(scope="module")
def t2w(tiny_cosyvoice_models):
    return Token2Wav.load(tiny_cosyvoice_models / MODEL_ID, threads=1)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 6561, N_PROMPT), (rng.standard_normal((2 * N_PROMPT, 80)) - 4).astype(np.float32),
            rng.standard_normal(192).astype(np.float32), rng.integers(0, 6561, N_TOKENS))


def _budget(t2w, tokens: int) -> int:
    """The bytes of flow cache the prompt and ``tokens`` target tokens need."""
    ratio = t2w.flow.params.token_mel_ratio
    return (N_PROMPT + tokens) * ratio * t2w.flow.stream_layout.cache_bytes_per_frame(STEPS)


def _stream(t2w, budget: int, seed: int = 7):
    """(hops, last piece, the stream, a copy of the vocoder's random state just before the end,
    the streamed samples held back then)."""
    prompt, mel, embedding, tokens = _inputs()
    stream = t2w.stream(prompt, mel, embedding, n_timesteps=STEPS, rng=np.random.default_rng(seed),
                        cache_budget=budget)
    hops = list(stream.push(np.zeros(0, dtype=np.int64)))
    for token in tokens:
        hops.extend(stream.push([token]))
    rng_before_end = copy.deepcopy(stream.vocoder.rng)
    held = stream.vocoder.held_back()
    return hops, stream.finish(), stream, rng_before_end, None if held is None else held.copy()


def test_a_long_sentence_past_the_budget_is_finished_whole_without_gap_or_repeat(t2w):
    prompt, mel, embedding, tokens = _inputs()
    hops, last, stream, rng, held = _stream(t2w, _budget(t2w, 60))  # passed at the 61st token: after one hop
    assert stream.limited and len(hops) == 1
    assert stream.flow.cache_bytes == 0  # freed at the switch, before the whole render
    whole = t2w(tokens, prompt, mel, embedding, n_timesteps=STEPS, rng=rng)
    sent = hops[0].shape[0]
    assert sent + last.shape[0] == whole.shape[0] == N_TOKENS * 2 * 480
    # After the fade-in over the held-back streamed tail (8 frames) it is the whole render, sample for sample.
    fade = 8 * 480
    np.testing.assert_array_equal(last[fade:], whole[sent + fade:])
    window = np.hamming(2 * fade)
    np.testing.assert_allclose(last[:fade], whole[sent:sent + fade] * window[:fade] + held * window[fade:],
                               rtol=0, atol=1e-6)
    # The hop before the switch is what an unlimited stream sends.
    unlimited_hops, _, unlimited, _, _ = _stream(t2w, 0)
    assert not unlimited.limited
    np.testing.assert_array_equal(hops[0], unlimited_hops[0])


def test_a_budget_the_prompt_passes_renders_the_sentence_as_not_streamed(t2w):
    prompt, mel, embedding, tokens = _inputs()
    hops, last, stream, _, _ = _stream(t2w, 1, seed=3)
    assert stream.limited and hops == []
    np.testing.assert_array_equal(last, t2w(tokens, prompt, mel, embedding, n_timesteps=STEPS,
                                            rng=np.random.default_rng(3)))


def test_within_the_budget_the_stream_is_unchanged(t2w):
    hops, last, stream, _, _ = _stream(t2w, _budget(t2w, N_TOKENS))
    free_hops, free_last, _, _, _ = _stream(t2w, 0)
    assert not stream.limited and len(hops) == len(free_hops) > 1
    np.testing.assert_array_equal(np.concatenate(hops + [last]), np.concatenate(free_hops + [free_last]))


def test_the_voice_state_is_kept_when_a_sentence_stops_streaming(t2w):
    t2w.flow.prompt_states.clear()
    _stream(t2w, _budget(t2w, 60))
    prompt, mel, embedding, _ = _inputs()
    assert t2w.flow.stream(prompt, mel, embedding, n_timesteps=STEPS).prompt_cached


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = open_tiny_engine(tiny_cosyvoice_models, stream_cache_max_mb=0.5)
    yield eng
    eng.close()


def test_the_engine_notes_the_sentence_that_stopped_streaming(engine):
    voice = sine_prompt(engine)
    chunks = list(engine.synthesize("The quick brown fox jumps over the lazy dog and keeps on running far.",
                                    voice, SynthesisOptions(stream=True, seed=1, n_timesteps=2)))
    notes = [note for chunk in chunks for note in chunk.notes]
    assert [note.code for note in notes] == ["stream_cache_limit"]
    assert dict(notes[0].params) == {"sentence": 1, "budget_mb": 0.5}
    assert chunks[-1].notes and not chunks[-1].continues
