"""Captions on CosyVoice (the tiny converted CosyVoice2): one cue per normalized sentence whether the
sentence came whole or as streamed hops, and sentence cues only (CosyVoice does not time its words)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions, VoicePrompt
from cosyedge.service.captions import CaptionTrack
from cosyedge.service.synthesis import stream
from tests.helpers.tiny_engines import open_engine

TEXT = "Hello there, this is the first sentence. And here is the second one, a little longer. 第三句。"


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice_models):
    engine = open_engine(tiny_cosyvoice_models)
    yield engine
    engine.close()


def voice(engine):
    rng = np.random.default_rng(0)
    return VoicePrompt(engine=engine.name, model_id=engine.model_id,
                       arrays={"embedding": rng.normal(size=192).astype(np.float32),
                               "tokens": rng.integers(0, 100, 25).astype(np.int64),
                               "mel": rng.normal(size=(50, 80)).astype(np.float32)})


@pytest.mark.parametrize("streamed", [False, True])
def test_one_sentence_cue_per_normalized_sentence(engine, streamed):
    analysis = engine.analyze(TEXT)
    options = dataclasses.replace(SynthesisOptions(seed=3), stream=streamed)
    track, pieces, hops = CaptionTrack(engine.capabilities.sample_rate), [], 0
    for chunk, piece in stream(engine, analysis, voice(engine), options, 5000):
        track.add(chunk, piece)
        pieces.append(piece)
        hops += chunk.continues
    captions, duration = track.captions(), sum(p.size for p in pieces) / engine.capabilities.sample_rate
    assert [c.text for c in captions.cues] == list(analysis.sentences)  # the tiny model says each
    assert all(0 <= c.start < c.end <= duration + 1e-9 for c in captions.cues)
    assert not captions.has_words
    if streamed:
        assert hops > 0  # the sentences really came in hops, and still made one cue each
