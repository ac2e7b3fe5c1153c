"""The two streamed estimator cache layouts compute the same flow (fp32, shrunken upstream modules).

A model converted before issue 31 streams with the packed ``kv`` input, a current one with per-layer
chunk-blocked inputs; at fp32 both must give the same mel, chunk by chunk, as upstream's streaming
(checked for the current one in test_token2wav_stream_parity.py), so here within 1e-4 of each other,
including a voice's second sentence that starts from the kept prompt state.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import cosyvoice_reference as ref

ref.install_shim()

pytestmark = [pytest.mark.reference, pytest.mark.slow]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from cosyedge.export.cosyvoice.v2.convert import convert
    from tests.helpers.legacy_flow_stream import write_packed_copy

    root = tmp_path_factory.mktemp("layouts")
    src = ref.write_model_dir(root / "src", ref.build_flow("tiny", seed=1), ref.build_hift("tiny", seed=1), size="tiny")
    convert(src, root / "blocked", steps=["flow", "hift"])
    write_packed_copy(root / "blocked", root / "packed", src)
    return root


def _mels(t2w, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    prompt, tokens = rng.integers(0, 6561, 55), rng.integers(0, 6561, 90)
    mel, embedding = (rng.standard_normal((110, 80)) - 4).astype(np.float32), rng.standard_normal(192)
    out = []
    for _ in range(2):  # the second sentence starts from the voice's kept prompt state
        stream = t2w.flow.stream(prompt, mel, embedding.astype(np.float32))
        out.append(np.concatenate([stream.push(tokens[i:i + 7]) for i in range(0, tokens.size, 7)]
                                  + [stream.finish()], axis=1))
        assert stream.prompt_cached == (len(out) == 2)
    return out


def test_packed_and_blocked_caches_give_the_same_streamed_mel(models):
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav

    packed = Token2Wav.load(models / "packed", threads=2, verify_hashes=True)
    blocked = Token2Wav.load(models / "blocked", threads=2)
    assert not packed.flow.stream_layout.blocked and blocked.flow.stream_layout.blocked
    assert packed.flow.stream_layout.kv_dtype == blocked.flow.stream_layout.kv_dtype == "float32"
    for a, b in zip(_mels(packed, 0), _mels(blocked, 0)):
        assert a.shape == b.shape == (80, 180)
        np.testing.assert_allclose(b, a, atol=1e-4, rtol=0)
