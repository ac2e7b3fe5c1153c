"""The CosyVoice3 DiT chunk-step graph: chained over a sentence's chunks from its own caches, it gives
what the whole DiT gives with upstream's streaming (chunk-causal) attention.

Needs torch (the networks are exported here): runs in .venv-ref. Random DiT of the fixture's size,
weights small enough that float32 rounding stays far below the tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the exporter needs torch: run in .venv-ref")
pytestmark = [pytest.mark.reference]

import onnxruntime as ort  # noqa: E402

from cosyedge.export.cosyvoice.v3.convert import export_dit_step  # noqa: E402
from cosyedge.export.cosyvoice.v3.nets import DiTConfig, DiTEstimator, chunk_bias  # noqa: E402

CHUNK = 50


def test_chunk_bias_is_upstreams_chunk_mask():
    bias = chunk_bias(5, 2)[0, 0]
    seen = (bias == 0).numpy()
    assert seen.tolist() == [[j < (i // 2 + 1) * 2 for j in range(5)] for i in range(5)]


def test_chained_chunk_steps_equal_the_chunk_masked_dit(tmp_path):
    torch.manual_seed(0)
    cfg = DiTConfig(dim=64, depth=2, heads=4, dim_head=16, lookahead_channels=64)
    estimator = DiTEstimator(cfg, chunk_frames=CHUNK).eval()
    with torch.no_grad():
        for param in estimator.parameters():
            param.copy_(torch.randn_like(param) * 0.05)
    layout = export_dit_step(estimator, tmp_path / "step.onnx", CHUNK, torch.float32)
    assert (layout["attention_layers"], layout["conv_tail"]) == (2, 30)
    step = ort.InferenceSession(str(tmp_path / "step.onnx"), providers=["CPUExecutionProvider"])
    frames = 130  # two whole chunks and a partial one
    x, mu, cond = (torch.randn(2, 80, frames) for _ in range(3))
    t, spks = torch.rand(2), torch.randn(2, 80)
    with torch.no_grad():
        whole = estimator(x, mu, t, spks, cond).numpy()
        estimator.chunk_frames = 0
        full_attention = estimator(x, mu, t, spks, cond).numpy()
    conv = np.zeros((2, 2, 30, 64), dtype=np.float32)
    past = {f"{kind}_{i}": np.zeros((0, 2, 4, CHUNK, 16), dtype=np.float32)
            for i in range(2) for kind in ("key", "value")}
    out = []
    for start in range(0, frames, CHUNK):
        end = min(start + CHUNK, frames)
        v, share_0, share_1, conv = step.run(None, {
            "x": x[:, :, start:end].numpy(), "mu": mu[:, :, start:end].numpy(), "t": t.numpy(),
            "spks": spks.numpy(), "cond": cond[:, :, start:end].numpy(),
            "offset": np.asarray([start], dtype=np.int64), "conv": conv, **past})
        out.append(v)
        if end - start < CHUNK:  # the partial last chunk: nothing attends to it later
            break
        for i, share in enumerate((share_0, share_1)):
            for j, kind in enumerate(("key", "value")):
                past[f"{kind}_{i}"] = np.concatenate([past[f"{kind}_{i}"], share[j][None]])
    chained = np.concatenate(out, axis=2)
    assert np.abs(chained - whole).max() < 1e-5
    assert np.abs(chained - full_attention)[:, :, :100].max() > 1e-3  # the mask matters
