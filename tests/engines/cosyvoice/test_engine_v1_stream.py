"""The CosyVoice-300M engine's streamed path on the tiny converted SFT model (the app's environment).

A streamed request yields a sentence as upstream streams v1: hops of 100 + 20 overlap tokens, the LLM
decoding in its own thread while flow and HiFT render the hop before (per-hop parity with upstream's
loop: test_v1_stream_parity.py). Random weights: the audio is noise; these tests check that a hop
comes out while the LLM still decodes, the hop sizes, cancel between hops, and that closing the stream
stops the decoder and lets the LLM go.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.loader import load_engine
from cosyedge.errors import CancelledError
from cosyedge.service import synthesis
from tests.helpers.hop_gate import LONG_V1_SENTENCE as TEXT

pytestmark = pytest.mark.slow  # loads the tiny model

#: Hop 1: 120 tokens = 206 mel frames, less the 34 faded into the next hop, less HiFT's 20 held back.
FIRST_HOP_SAMPLES = (206 - 34 - 20) * 256


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    eng = load_engine(Settings(models_dir=tiny_cosyvoice_models, model="cosyvoice1-sft-tiny", onnx_threads=1))
    yield eng
    eng.close()


class GatedDecoder:
    """Wraps the LLM's token iterator: after ``release_after`` tokens it waits until the test saw a
    hop (or 20 s), so a hop can only arrive first if the engine streams while the LLM decodes."""

    def __init__(self, lm, release_after: int) -> None:
        self.lm, self.release_after = lm, release_after
        self.hop_seen = threading.Event()
        self.seen_before_end: bool | None = None
        self.made = 0
        self._real = lm.iter_tokens

    def __enter__(self) -> "GatedDecoder":
        def gated(*args, **kwargs):
            for token in self._real(*args, **kwargs):
                self.made += 1
                if self.made == self.release_after:
                    self.seen_before_end = self.hop_seen.wait(20)
                yield token
        self.lm.iter_tokens = gated
        return self

    def __exit__(self, *exc) -> None:
        self.lm.iter_tokens = self._real


def test_a_sentence_streams_as_hops_while_the_llm_decodes(engine):
    with engine.using_lm() as lm, GatedDecoder(lm, release_after=125) as gate:
        chunks = []
        for chunk in engine.synthesize(TEXT, "中文女", SynthesisOptions(seed=3, stream=True)):
            chunks.append(chunk)
            gate.hop_seen.set()
    assert gate.seen_before_end is True, "no hop came out while the LLM was still decoding"
    assert len(chunks) >= 2 and {c.index for c in chunks} == {0}
    assert [c.continues for c in chunks] == [True] * (len(chunks) - 1) + [False]
    assert chunks[0].audio.size == FIRST_HOP_SAMPLES and chunks[0].sample_rate == 22050
    assert all(np.isfinite(c.audio).all() and np.abs(c.audio).max() <= 0.99 for c in chunks)


def test_streamed_result_joins_hops_without_pauses(engine):
    options = SynthesisOptions(seed=5, stream=True)
    chunks = list(engine.synthesize(TEXT, "中文女", options))
    result = synthesis.synthesize(engine, TEXT, "中文女", options, max_chars=5000)
    assert len(chunks) >= 2 and result.audio.size == sum(c.audio.size for c in chunks)


def test_cancel_between_hops_emits_no_more(engine):
    state = {"cancel": False}
    got = []
    with pytest.raises(CancelledError):
        for chunk in engine.synthesize(TEXT, "中文女", SynthesisOptions(seed=3, stream=True),
                                       cancelled=lambda: state["cancel"]):
            got.append(chunk)
            state["cancel"] = True
    assert len(got) == 1 and got[0].continues
    assert engine.lm_users == 0


def test_closing_the_stream_stops_the_decoder_and_releases_the_llm(engine):
    with engine.using_lm() as lm, GatedDecoder(lm, release_after=125) as gate:
        gen = engine.synthesize(TEXT, "中文女", SynthesisOptions(seed=3, stream=True))
        next(gen)
        decoders = [t for t in threading.enumerate() if t.name == "cosyvoice-decode"]
        assert decoders and decoders[0].is_alive()  # held at token 125, mid-sentence
        gate.hop_seen.set()
        gen.close()  # what a disconnected client's request does
        assert not decoders[0].is_alive()
    assert engine.lm_users == 0
    assert engine._release_lm_if_idle()  # noqa: SLF001 - nothing holds the LLM (or its cache) any more


def test_not_streamed_and_other_speeds_keep_one_chunk_per_sentence(engine):
    for options in (SynthesisOptions(seed=3), SynthesisOptions(seed=3, stream=True, speed=1.2)):
        chunks = list(engine.synthesize(TEXT, "中文女", options))
        assert len(chunks) == 1 and not chunks[0].continues
