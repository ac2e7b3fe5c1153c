"""Models converted before the chunk-blocked estimator cache (issue 31) keep loading and streaming.

Their streamed estimator graph takes one packed ``kv`` input and their manifest names no
``kv_layout``; the tiny build writes such a copy of the tiny model (tests/helpers/legacy_flow_stream.py).
Its stream must be the current model's, up to int8 rounding (same weights, other graph).
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from cosyedge.engines.loader import load_engine
from cosyedge.export.cosyvoice.common.quantize import snr_db
from tests.helpers import tiny_models

pytestmark = pytest.mark.slow  # loads the tiny models

TEXT = "The quick brown fox jumps over the lazy dog, and the tiny tokenizer reads it for several hops."


@pytest.fixture(scope="module")
def legacy_models(tiny_cosyvoice_models):
    return tiny_models.legacy_models_dir(tiny_cosyvoice_models.parent)


def _streamed_mel(t2w: Token2Wav) -> np.ndarray:
    rng = np.random.default_rng(0)
    prompt, tokens = rng.integers(0, 6561, 60), rng.integers(0, 6561, 110)
    mel, embedding = (rng.standard_normal((120, 80)) - 4).astype(np.float32), rng.standard_normal(192)
    stream = t2w.flow.stream(prompt, mel, embedding.astype(np.float32))
    return np.concatenate([stream.push(tokens[:70]), stream.push(tokens[70:]), stream.finish()], axis=1)


def test_the_packed_cache_model_streams_the_same_mel(tiny_cosyvoice_models, legacy_models):
    old = Token2Wav.load(legacy_models / tiny_models.PACKED_STREAM_MODEL_ID, threads=1, verify_hashes=True)
    new = Token2Wav.load(tiny_cosyvoice_models / tiny_models.MODEL_ID, threads=1)
    assert not old.flow.stream_layout.blocked and new.flow.stream_layout.blocked
    assert "kv" in {i.name for i in old.flow.stream_sessions[1].get_inputs()}
    a, b = _streamed_mel(old), _streamed_mel(new)
    assert a.shape == b.shape == (80, 220)
    snr = snr_db(b, a)
    print(f"packed vs chunk-blocked cache, int8 tiny model: streamed mel SNR {snr:.1f} dB")
    assert snr > 30.0


def test_the_engine_speaks_streamed_with_a_model_converted_before(legacy_models):
    engine = load_engine(Settings(models_dir=legacy_models, model=tiny_models.PACKED_STREAM_MODEL_ID,
                                  onnx_threads=1, thread_calibration=False))
    try:
        voice = engine.presets()[0]
        chunks = list(engine.synthesize(TEXT, voice, SynthesisOptions(seed=3, stream=True)))
        assert len(chunks) >= 2 and [c.continues for c in chunks][-1] is False
        assert all(np.isfinite(c.audio).all() for c in chunks) and sum(c.audio.size for c in chunks) > 0
        assert engine.token2wav.flow.stream_cache_bytes == 0
    finally:
        engine.close()
