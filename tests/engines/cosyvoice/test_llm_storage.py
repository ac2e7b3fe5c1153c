"""Storage choices that shrink the converted CosyVoice directory and its memory (issue 8).

float16 storage of float32 weights, the int8 speech tokenizer option, the LLM weight plans, the
memory-releasing session wrapper and the converter's option checks. Small synthetic graphs only;
the full-size figures are in docs/bench-log/cosyvoice.md ("CosyVoice LLM").
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the converter's graph tools need onnx")

from cosyedge.engines.cosyvoice.common.manifest import ReleasingSession, open_session  # noqa: E402
from cosyedge.errors import InputError  # noqa: E402
from cosyedge.export.cosyvoice.common.llm import (DEFAULT_PLAN, FP32, INT4_PLAN, WeightPlan, check_options,  # noqa: E402
                                 int8_speech_tokenizer, plan_for)
from cosyedge.export.cosyvoice.common.quantize import store_weights_fp16  # noqa: E402
from tests.helpers.cosyvoice_tiny import speech_tokenizer_standin  # noqa: E402


pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


def _conv_matmul_graph(path, w_conv: np.ndarray, w_mm: np.ndarray, bias: np.ndarray) -> None:
    """x [1, 8, T] -> Conv(k3, pad 1) + bias -> transpose -> MatMul -> y [1, T, 16]."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "wc", "b"], ["c"], pads=[1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "wm"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 16])],
                              initializer=[numpy_helper.from_array(w_conv, "wc"), numpy_helper.from_array(w_mm, "wm"),
                                           numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_fp16_storage_computes_with_the_rounded_float32_weights(tmp_path):
    import onnx
    from onnx import TensorProto

    rng = np.random.default_rng(0)
    w_conv = rng.normal(size=(64, 8, 3)).astype(np.float32)    # 1536 elements: stored as float16
    w_mm = rng.normal(size=(64, 16)).astype(np.float32)        # 1024: stored as float16
    w_mm[0, 0] = 1e6                                           # ...unless float16 cannot hold it
    bias = rng.normal(size=64).astype(np.float32)              # small: stays float32
    _conv_matmul_graph(tmp_path / "fp32.onnx", w_conv, w_mm, bias)
    assert store_weights_fp16(tmp_path / "fp32.onnx", tmp_path / "fp16.onnx") == 1
    stored = {t.name: t.data_type for t in onnx.load(str(tmp_path / "fp16.onnx")).graph.initializer}
    assert stored == {"wc__fp16": TensorProto.FLOAT16, "wm": TensorProto.FLOAT, "b": TensorProto.FLOAT}
    w_mm[0, 0] = 0.5
    _conv_matmul_graph(tmp_path / "fp32.onnx", w_conv, w_mm, bias)
    assert store_weights_fp16(tmp_path / "fp32.onnx", tmp_path / "fp16.onnx") == 2
    _conv_matmul_graph(tmp_path / "rounded.onnx", w_conv.astype(np.float16).astype(np.float32),
                       w_mm.astype(np.float16).astype(np.float32), bias)
    assert (tmp_path / "fp16.onnx").stat().st_size < 0.6 * (tmp_path / "fp32.onnx").stat().st_size
    x = rng.normal(size=(1, 8, 50)).astype(np.float32)
    got = open_session(tmp_path / "fp16.onnx", 1).run(None, {"x": x})[0]
    want = open_session(tmp_path / "rounded.onnx", 1).run(None, {"x": x})[0]
    exact = open_session(tmp_path / "fp32.onnx", 1).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert 0 < np.abs(got - exact).max() < 1e-2 * np.abs(exact).max()


def test_releasing_session_gives_the_same_results_and_delegates(tmp_path):
    rng = np.random.default_rng(1)
    _conv_matmul_graph(tmp_path / "g.onnx", rng.normal(size=(64, 8, 3)).astype(np.float32),
                       rng.normal(size=(64, 16)).astype(np.float32), rng.normal(size=64).astype(np.float32))
    plain = open_session(tmp_path / "g.onnx", 1)
    released = open_session(tmp_path / "g.onnx", 1, release_memory=True)
    assert isinstance(released, ReleasingSession) and not isinstance(plain, ReleasingSession)
    assert [i.name for i in released.get_inputs()] == ["x"]
    for frames in (40, 400, 40):  # a smaller run after a larger one still works after the shrink
        x = rng.normal(size=(1, 8, frames)).astype(np.float32)
        np.testing.assert_array_equal(released.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])


def test_int8_speech_tokenizer_is_smaller_and_mostly_agrees(tmp_path):
    path = tmp_path / "speech_tokenizer_v2.onnx"
    speech_tokenizer_standin(path)
    before = path.stat().st_size
    record = int8_speech_tokenizer(path, frames=400)
    assert record["bytes_fp32"] == before and record["bytes_int8"] == path.stat().st_size
    assert path.stat().st_size < 0.4 * before
    assert 0.5 <= record["token_agreement_random_input"] <= 1.0
    session = open_session(path, 1)
    mel = np.random.default_rng(2).normal(size=(1, 128, 80)).astype(np.float32)
    tokens = session.run(None, {"feats": mel, "feats_length": np.array([80], np.int32)})[0]
    assert tokens.shape == (1, 20) and tokens.min() >= 0 and tokens.max() < 6561


def test_weight_plans_and_converter_choices():
    assert plan_for("none") == FP32 and plan_for("int8") == DEFAULT_PLAN and plan_for("int8", 8) == DEFAULT_PLAN
    assert plan_for("int8", 4) == INT4_PLAN and INT4_PLAN.label == "int4-weight-only-block32"
    assert DEFAULT_PLAN.label == "int8-weight-only-block128" and FP32.label == "fp32"
    with pytest.raises(InputError, match="--quantize int8"):
        plan_for("none", 4)
    with pytest.raises(InputError, match="4 or 8"):
        plan_for("int8", 2)
    with pytest.raises(InputError, match="--speech-tokenizer-int8 needs --quantize int8"):
        check_options("none", {"speech_tokenizer_int8": True})
    check_options("int8", {"llm_bits": 4, "speech_tokenizer_int8": True})
    with pytest.raises(ValueError, match="block"):
        WeightPlan(bits=8, block=256)
    with pytest.raises(ValueError, match="speech_embedding"):
        WeightPlan(speech_embedding="bfloat16")
    assert json.loads(json.dumps(DEFAULT_PLAN.__dict__))["block"] == 128
