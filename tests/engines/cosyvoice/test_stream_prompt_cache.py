"""The streamed flow's voice prompt cache on the tiny converted model (no torch).

The prompt's chunks whose look-ahead is still prompt are computed for a voice's first sentence and
kept; the next sentence with the same prompt, embedding and step count starts from them. The mel
must be exactly what a stream without the cache gives, with those chunks' estimator work skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from tests.helpers.tiny_models import MODEL_ID

pytestmark = pytest.mark.slow  # loads the tiny model

N_PROMPT, N_TOKENS, STEPS = 60, 80, 10   # prompt chunks [0, 25) and [25, 50) have prompt look-ahead


@pytest.fixture
def t2w(tiny_cosyvoice_models):
    return Token2Wav.load(tiny_cosyvoice_models / MODEL_ID, threads=1)


class Counting:
    """Stands in for the estimator-step session and counts the frames it is run on."""

    def __init__(self, session) -> None:
        self.session, self.frames = session, 0

    def run(self, names, feeds):  # noqa: ANN001
        self.frames += feeds["x"].shape[2]
        return self.session.run(names, feeds)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 6561, N_PROMPT), (rng.standard_normal((2 * N_PROMPT, 80)) - 4).astype(np.float32),
            rng.standard_normal(192).astype(np.float32), rng.integers(0, 6561, N_TOKENS))


def _sentence(t2w, prompt, mel, embedding, tokens, steps=STEPS):  # noqa: ANN001
    """(mel of the whole sentence pushed token by token, estimator frames, whether the prompt was cached)."""
    encoder, estimator = t2w.flow.stream_sessions
    counting = Counting(estimator)
    t2w.flow.stream_sessions = (encoder, counting)
    try:
        stream = t2w.flow.stream(prompt, mel, embedding, n_timesteps=steps)
        cached = stream.prompt_cached
        out = [stream.push(np.zeros(0, dtype=np.int64))] + [stream.push([t]) for t in tokens] + [stream.finish()]
    finally:
        t2w.flow.stream_sessions = (encoder, estimator)
    return np.concatenate(out, axis=1), counting.frames, cached


def test_the_next_sentence_starts_from_the_voice_state_and_gives_the_same_mel(t2w):
    prompt, mel, embedding, tokens = _inputs()
    first, first_frames, cached = _sentence(t2w, prompt, mel, embedding, tokens)
    assert not cached and first_frames == STEPS * 2 * (N_PROMPT + N_TOKENS)
    second, second_frames, cached = _sentence(t2w, prompt, mel, embedding, tokens)
    assert cached
    assert second_frames == first_frames - STEPS * 2 * 50  # the two prompt-only chunks are not run again
    np.testing.assert_array_equal(second, first)
    other_text = _inputs(seed=1)[3]
    third, _, cached = _sentence(t2w, prompt, mel, embedding, other_text)
    t2w.flow.prompt_states.clear()
    fresh, _, _ = _sentence(t2w, prompt, mel, embedding, other_text)
    assert cached
    np.testing.assert_array_equal(third, fresh)


def test_the_state_is_the_voice_s_and_the_step_count_s(t2w):
    prompt, mel, embedding, tokens = _inputs()
    _sentence(t2w, prompt, mel, embedding, tokens)
    assert not _sentence(t2w, prompt, mel, embedding, tokens, steps=4)[2]          # other step count
    assert not _sentence(t2w, prompt, mel, -embedding, tokens, steps=4)[2]         # other voice
    assert not _sentence(t2w, prompt, mel, embedding, tokens)[2]  # one voice kept: the last one used
    assert _sentence(t2w, prompt, mel, embedding, tokens)[2]


def test_two_sentences_at_once_do_not_share_the_state(t2w):
    prompt, mel, embedding, tokens = _inputs()
    _sentence(t2w, prompt, mel, embedding, tokens)
    one = t2w.flow.stream(prompt, mel, embedding)
    two = t2w.flow.stream(prompt, mel, embedding)
    assert one.prompt_cached and not two.prompt_cached
    two.push(tokens)
    two.finish()
    assert t2w.flow.prompt_states.take(next(iter(t2w.flow.prompt_states._states))) is not None


def test_the_kept_state_holds_the_prompt_frames_not_the_sentence(t2w):
    prompt, mel, embedding, tokens = _inputs()
    stream = t2w.flow.stream(prompt, mel, embedding)
    stream.push(np.concatenate([tokens] * 4))
    sentence_bytes = stream.cache_bytes
    stream.finish()
    assert t2w.flow.prompt_states.nbytes < sentence_bytes / 3
    (state,) = t2w.flow.prompt_states._states.values()
    assert {kv.length for kv in state.kv} == {100}                   # the two prompt chunks' frames
    assert {kv.nbytes for kv in state.kv} == {150 * t2w.flow.stream_layout.cache_bytes_per_frame(1)}
