"""The output checks setup runs before the manifest names a derived graph, the fused runner or the
crop (export/kokoro/checks.py): the band-energy distance, and the checks on a tiny Kokoro-shaped
model and on made-up clips."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from cosyedge.export.kokoro import checks

RNG = np.random.default_rng(7)


def test_spectral_distance_measures_level_changes_and_ignores_silence():
    t = np.arange(24_000) / 24_000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    assert checks.spectral_distance_db(tone, tone) == 0.0
    assert checks.spectral_distance_db(tone, 2 * tone) == pytest.approx(6.02, abs=0.01)
    quiet_noise = tone + RNG.normal(0, 1e-6, tone.size).astype(np.float32)  # 110 dB down: not "loud" bins
    assert checks.spectral_distance_db(tone, quiet_noise) < 0.01
    with pytest.raises(ValueError, match="same length"):
        checks.spectral_distance_db(tone, tone[:-1])


def _tiny_variant(source, target, constant: str, value: float):
    model = onnx.load(str(source))
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == constant:
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(value, np.float32), constant))
    onnx.save(model, target)
    return target


def test_check_close_output_accepts_near_and_rejects_far_or_longer_audio(tmp_path):
    from tests.helpers import tiny_kokoro

    voices = tmp_path / "voices.npz"
    np.savez(voices, **{checks.CHECK_VOICE: RNG.normal(0, 0.2, (510, 1, 256)).astype(np.float32)})
    shipped = tiny_kokoro.build(tmp_path / "shipped.onnx")
    near = _tiny_variant(shipped, tmp_path / "near.onnx", "base", 0.1001)  # 0.01 dB louder
    assert checks.check_close_output(shipped, near, voices) < 0.05
    louder = _tiny_variant(shipped, tmp_path / "louder.onnx", "base", 0.2)  # ~6 dB
    with pytest.raises(RuntimeError, match="dB from shipped.onnx"):
        checks.check_close_output(shipped, louder, voices)
    longer = _tiny_variant(shipped, tmp_path / "longer.onnx", "per_token", 650.0)
    with pytest.raises(RuntimeError, match="durations moved"):
        checks.check_close_output(shipped, longer, voices)


def test_check_same_output_accepts_equal_and_rejects_different_graphs(tmp_path):
    from tests.helpers import tiny_kokoro

    voices = tmp_path / "voices.npz"
    np.savez(voices, **{checks.CHECK_VOICE: RNG.normal(0, 0.2, (510, 1, 256)).astype(np.float32)})
    shipped = tiny_kokoro.build(tmp_path / "shipped.onnx")
    same = tiny_kokoro.build(tmp_path / "same.onnx")
    checks.check_same_output(shipped, same, voices)  # no error

    model = onnx.load(str(shipped))
    for node in model.graph.node:  # the tiny model's output level: 0.1 + |mean(style)|
        if node.op_type == "Constant" and node.output[0] == "base":
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(0.1001, np.float32), "base"))
    onnx.save(model, tmp_path / "other.onnx")
    with pytest.raises(RuntimeError, match="differs from shipped.onnx"):
        checks.check_same_output(shipped, tmp_path / "other.onnx", voices)


def test_check_refuses_a_crop_that_cuts_speech_or_moves_it():
    t = np.arange(24_000, dtype=np.float32)
    reference = np.where((t > 6000) & (t < 18_000), 0.3 * np.sin(t / 9), 1e-4).astype(np.float32)
    good = reference[3000:21_000].copy()
    assert checks.check_cropped_audio(reference, good, 3000) == 0.0
    with pytest.raises(RuntimeError, match="cuts speech"):
        checks.check_cropped_audio(reference, reference[7000:21_000], 7000)
    with pytest.raises(RuntimeError, match="dB from the shipped graph"):
        checks.check_cropped_audio(reference, 3 * good, 3000)
