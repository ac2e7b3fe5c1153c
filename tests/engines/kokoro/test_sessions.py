"""The onnxruntime sessions of the Kokoro runtime graph (engines/kokoro/sessions.py), on a tiny
generated ONNX model with Kokoro's signature."""

from __future__ import annotations

import numpy as np

from cosyedge.engines.kokoro.sessions import make_session
from tests.helpers import tiny_kokoro


def test_session_has_no_memory_pattern_and_same_audio(tmp_path):
    """Every sentence is a new input shape, so a per-shape memory pattern only grew the arena
    (bench/kokoro_gap.py, "options"); without it the audio must stay bit-identical."""
    import onnxruntime as ort

    path = tiny_kokoro.build(tmp_path / "tiny.onnx")
    session = make_session(path, 1)
    opts = session.get_session_options()
    assert opts.enable_mem_pattern is False
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    opts.enable_mem_pattern = True
    patterned = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    style = np.random.default_rng(1).normal(0, 0.2, (1, 256)).astype(np.float32)
    for n in (5, 17, 9, 17):
        feeds = {"tokens": np.arange(n + 2, dtype=np.int64).reshape(1, -1) % 50, "style": style,
                 "speed": np.array([1.0], np.float32)}
        assert np.array_equal(session.run(None, feeds)[0], patterned.run(None, feeds)[0])
