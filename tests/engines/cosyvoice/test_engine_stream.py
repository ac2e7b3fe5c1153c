"""The CosyVoice engine's streamed path on the tiny converted model, in the app's environment (no torch).

A streamed request (``SynthesisOptions(stream=True)``) yields each sentence as hops: upstream's
schedule (first hop 25 tokens + the prompt's padding + 3 look-ahead, then 25), the LLM decoding in
its own thread while the previous hop is rendered. Random weights: the audio is noise; these tests
check the order, the timing against the decoder, cancel and stop.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions
from cosyedge.errors import CancelledError
from cosyedge.service import synthesis
from tests.helpers.tiny_models import open_tiny_engine, sine_prompt

pytestmark = pytest.mark.slow  # loads the tiny model (~5 s)

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = open_tiny_engine(tiny_cosyvoice_models)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompt(engine):
    return sine_prompt(engine)


class GatedDecoder:
    """Wraps the LLM's token iterator: after ``release_after`` tokens it waits until the test saw a
    hop (or 20 s), so a hop can only arrive first if the engine streams while the LLM decodes."""

    def __init__(self, lm, release_after: int) -> None:
        self.lm, self.release_after = lm, release_after
        self.hop_seen = threading.Event()
        self.seen_before_end = None
        self.made = 0
        self._real = lm.iter_tokens

    def __enter__(self):
        def gated(*args, **kwargs):
            for token in self._real(*args, **kwargs):
                self.made += 1
                if self.made == self.release_after:
                    self.seen_before_end = self.hop_seen.wait(20)
                yield token
        self.lm.iter_tokens = gated
        return self

    def __exit__(self, *exc):
        self.lm.iter_tokens = self._real


def test_a_sentence_streams_as_hops_while_the_llm_decodes(engine, prompt):
    with engine.using_lm() as lm, GatedDecoder(lm, release_after=60) as gate:
        chunks = []
        for chunk in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True)):
            chunks.append(chunk)
            gate.hop_seen.set()
    assert gate.seen_before_end is True, "no hop came out while the LLM was still decoding"
    assert len(chunks) >= 3
    assert [c.continues for c in chunks] == [True] * (len(chunks) - 1) + [False]
    assert {c.index for c in chunks} == {0}
    n_prompt = prompt.arrays["tokens"].size
    first_hop_tokens = 25 + (-n_prompt % 25)
    # Hop audio: the first hop's frames minus the 8 frames HiFT holds back; later hops 25 tokens.
    assert chunks[0].audio.size == (2 * first_hop_tokens - 8) * 480
    assert all(c.audio.size == 50 * 480 for c in chunks[1:-1])
    assert all(np.isfinite(c.audio).all() and np.abs(c.audio).max() <= 0.99 for c in chunks)


def test_streamed_result_joins_hops_without_pauses(engine, prompt):
    options = SynthesisOptions(seed=5, stream=True)
    chunks = list(engine.synthesize(TEXT, prompt, options))
    result = synthesis.synthesize(engine, TEXT, prompt, options, max_chars=5000)
    assert result.sentences == [chunks[0].text]
    assert result.audio.size == sum(c.audio.size for c in chunks)  # no pause between hops


def test_cancel_emits_at_most_one_more_hop(engine, prompt):
    state = {"cancel": False}
    got = []
    with pytest.raises(CancelledError):
        for chunk in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True),
                                       cancelled=lambda: state["cancel"]):
            got.append(chunk)
            state["cancel"] = True
    assert len(got) == 1


def test_closing_the_stream_stops_the_decoder(engine, prompt):
    with engine.using_lm() as lm, GatedDecoder(lm, release_after=40) as gate:
        gen = engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True))
        next(gen)
        decoders = [t for t in threading.enumerate() if t.name == "cosyvoice-decode"]
        assert decoders and decoders[0].is_alive()  # held at token 40, mid-sentence
        gate.hop_seen.set()
        gen.close()  # what a disconnected client's request does
        assert not decoders[0].is_alive()
        assert gate.made < 60  # it stopped rather than decoding the rest of the sentence
    assert engine.lm_users == 0


def test_not_streamed_request_keeps_one_chunk_per_sentence(engine, prompt):
    chunks = list(engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3)))
    assert len(chunks) == 1 and not chunks[0].continues


def test_fewer_flow_steps_change_the_audio(engine, prompt):
    a = np.concatenate([c.audio for c in engine.synthesize(TEXT, prompt, SynthesisOptions(seed=3, stream=True))])
    b = np.concatenate([c.audio for c in engine.synthesize(
        TEXT, prompt, SynthesisOptions(seed=3, stream=True, n_timesteps=4))])
    assert a.size == b.size and np.abs(a - b).max() > 1e-3
