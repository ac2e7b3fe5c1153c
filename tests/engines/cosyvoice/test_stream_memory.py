"""What a streamed sentence holds, and when it gives it back, on the tiny converted model (no torch).

The flow's key/value caches grow with the sentence (gigabytes at full size): they must go when the
sentence ends, when it is cancelled and when its client goes away, however long something still
refers to the stream; and two streams at once must both make progress.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from cosyedge.errors import CancelledError
from tests.helpers.tiny_models import MODEL_ID, open_tiny_engine, sine_prompt

pytestmark = pytest.mark.slow  # loads the tiny model

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = open_tiny_engine(tiny_cosyvoice_models, thread_calibration=False)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompt(engine):
    return sine_prompt(engine)


def _flow(engine):
    return engine.token2wav.flow


def test_a_finished_stream_keeps_no_cache_while_it_is_still_referenced(tiny_cosyvoice_models):
    t2w = Token2Wav.load(tiny_cosyvoice_models / MODEL_ID, threads=1)
    rng = np.random.default_rng(0)
    prompt, tokens = rng.integers(0, 6561, 60), rng.integers(0, 6561, 120)
    mel, embedding = (rng.standard_normal((120, 80)) - 4).astype(np.float32), rng.standard_normal(192)
    stream = t2w.stream(prompt, mel, embedding.astype(np.float32), expected_tokens=tokens.size)
    sizes = set()
    for token in tokens:
        stream.push([token])
        sizes.add(stream.flow.cache_bytes)
    assert len(sizes) <= 2  # the prompt's room, then the sentence's, made once: no growth by steps
    room = stream.flow.cache_bytes
    assert t2w.flow.stream_cache_bytes >= room > 0
    stream.finish()
    assert stream.flow.cache_bytes == 0 and t2w.flow.stream_cache_bytes == 0
    assert 0 < t2w.flow.prompt_states.nbytes < room / 2  # the voice's prompt chunks are kept, not the sentence


def test_a_cancelled_sentence_gives_its_cache_back_at_once(engine, prompt):
    state = {"cancel": False}
    with pytest.raises(CancelledError) as raised:
        for _ in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True),
                                   cancelled=lambda: state["cancel"]):
            assert _flow(engine).stream_cache_bytes > 0
            state["cancel"] = True
    # The traceback still refers to the sentence's frames (and so to its stream): the caches went anyway.
    assert raised.value.__traceback__ is not None
    assert _flow(engine).stream_cache_bytes == 0


def test_a_client_that_goes_away_gives_the_cache_back(engine, prompt):
    gen = engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True))
    next(gen)
    assert _flow(engine).stream_cache_bytes > 0
    gen.close()
    assert _flow(engine).stream_cache_bytes == 0


def test_two_streams_at_once_both_progress(engine, prompt):
    """One stream held after its first hop (its client reads slowly) does not stop another from
    running to its end; then the first finishes too, with the audio it would have had alone."""
    alone = np.concatenate([c.audio for c in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True))])
    first = engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True))
    held = [next(first)]
    assert held[0].continues
    other = [c.audio for c in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=4, stream=True))]
    assert len(other) >= 3  # ran hop by hop to its end while the first was mid-sentence
    assert _flow(engine).stream_cache_bytes > 0  # the first still holds its caches
    held.extend(first)
    assert not held[-1].continues
    np.testing.assert_array_equal(np.concatenate([c.audio for c in held]), alone)
    assert _flow(engine).stream_cache_bytes == 0
