"""The graph passes measured for the benchmarks and not used by setup
(export/kokoro/measured_passes.py): the STFT as a Conv and the float dequantization passes, on tiny
generated graphs in the shipped quantizer's pattern."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.export.kokoro import measured_passes
from tests.export.kokoro.test_optimize import OUT_SHAPE, quantized_conv_model, rewritten, run, run_all, tensor

RNG = np.random.default_rng(7)


def test_stft_as_conv_matches_the_stft_kernel():
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    nodes = [helper.make_node("STFT", ["s", "hop", "win", "n"], ["X"], name="/decoder/STFT", onesided=1),
             helper.make_node("Transpose", ["X"], ["Xt"], perm=[0, 2, 1, 3]),
             helper.make_node("Gather", ["Xt", "i0"], ["re"], axis=3),
             helper.make_node("Gather", ["Xt", "i1"], ["im"], axis=3)]
    graph = helper.make_graph(nodes, "stft", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, None])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", "b", "f"]) for n in ("re", "im")],
                              [tensor("hop", np.int64(5)), tensor("win", window), tensor("n", np.int64(20)),
                               tensor("i0", np.int64(0)), tensor("i1", np.int64(1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    conv, counts = rewritten(model, ["stft_as_conv"], measured_passes.rewrite)
    assert counts == {"stft_as_conv": 1} and "STFT" not in {n.op_type for n in conv.graph.node}
    x = RNG.normal(0, 1, (1, 203)).astype(np.float32)
    for expected, got in zip(run_all(model, {"s": x}), run_all(conv, {"s": x})):
        assert got.shape == expected.shape == (1, 11, 37)
        np.testing.assert_allclose(got, expected, atol=1e-4)  # the imaginary part's sign included


def test_conv_to_float_matches_dequantized_math():
    model = quantized_conv_model(16, 8, 3, pads=(1, 1))
    fp32, counts = rewritten(model, ["conv"], measured_passes.rewrite)
    assert counts == {"conv": 1} and [n.op_type for n in fp32.graph.node] == ["Conv"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w = (inits["w"].astype(np.float32) - np.float32(inits["wz"])) * inits["ws"]
    x = RNG.uniform(-1, 1, (1, 16, 50)).astype(np.float32)
    xp = np.pad(x[0], ((0, 0), (1, 1)))
    reference = np.stack([np.einsum("mck,ck->m", w, xp[:, t:t + 3]) for t in range(50)], axis=1) + inits["b"][:, None]
    np.testing.assert_allclose(run(fp32, {"x": x})[0], reference, rtol=1e-4, atol=1e-4)
    # and the int8 original is within its activation-quantization error of it
    quantized = run(model, {"x": x})[0]
    assert np.linalg.norm(quantized - reference) / np.linalg.norm(reference) < 0.02


def quantized_matmul_model(k: int, n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
             helper.make_node("MatMulInteger", ["aq", "b", "az", "bz"], ["acc"], name="mm_quant"),
             helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["as", "bs"], ["scale"]),
             helper.make_node("Mul", ["acc_f", "scale"], ["y"])]
    inits = [tensor("b", RNG.integers(-127, 128, (k, n), dtype=np.int8)), tensor("bz", np.zeros(n, np.int8)),
             tensor("bs", RNG.uniform(0.001, 0.01, n).astype(np.float32))]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_to_float_matches_dequantized_math():
    model = quantized_matmul_model(32, 24)
    fp32, counts = rewritten(model, ["matmul"], measured_passes.rewrite)
    assert counts == {"matmul": 1} and [n.op_type for n in fp32.graph.node] == ["MatMul"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    a = RNG.uniform(-1, 1, (1, 10, 32)).astype(np.float32)
    reference = a @ (inits["b"].astype(np.float32) * inits["bs"])
    np.testing.assert_allclose(run(fp32, {"a": a}), reference, rtol=1e-5, atol=1e-5)
    assert np.linalg.norm(run(model, {"a": a}) - reference) / np.linalg.norm(reference) < 0.02


def test_lstm_to_float_matches_dynamic_quantize_lstm():
    hidden, features = 8, 6
    w_q = RNG.integers(-127, 128, (2, features, 4 * hidden), dtype=np.int8)
    r_q = RNG.integers(-127, 128, (2, hidden, 4 * hidden), dtype=np.int8)
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["y"], name="lstm_quant", domain="com.microsoft", direction="bidirectional",
                            hidden_size=hidden)
    inits = [tensor("w", w_q), tensor("r", r_q), tensor("b", RNG.normal(0, 0.1, (2, 8 * hidden)).astype(np.float32)),
             tensor("ws", np.array([0.01, 0.02], np.float32)), tensor("wz", np.zeros(2, np.int8)),
             tensor("rs", np.array([0.015, 0.01], np.float32)), tensor("rz", np.zeros(2, np.int8))]
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1, features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s", "d", "b", "h"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    fp32, counts = rewritten(model, ["lstm"], measured_passes.rewrite)
    assert counts == {"lstm": 1} and [n.op_type for n in fp32.graph.node] == ["LSTM"]
    x = RNG.uniform(-1, 1, (12, 1, features)).astype(np.float32)
    quantized, floated = run(model, {"x": x}), run(fp32, {"x": x})
    assert floated.shape == quantized.shape == (12, 2, 1, hidden)
    # only the activation quantization differs: a wrong gate order or layout gives ~100 % error
    assert np.linalg.norm(floated - quantized) / np.linalg.norm(quantized) < 0.03


def test_rewrite_rejects_conflicting_passes():
    model = quantized_conv_model(4, 4, 3)
    with pytest.raises(ValueError, match="pick one"):
        measured_passes.rewrite(model, ["conv", "conv_as_matmul"])
    with pytest.raises(ValueError, match="unknown passes"):
        measured_passes.rewrite(model, ["nope"])


def test_measured_passes_run_after_the_products_in_one_rewrite():
    model = quantized_conv_model(8, 8, 3, pads=(1, 1), name="/decoder/conv_quant")
    _, counts = rewritten(model, ["lstm", "conv_as_matmul", "float_tail"], measured_passes.rewrite)
    assert list(counts) == ["conv_as_matmul", "float_tail", "lstm"]
    assert counts == {"conv_as_matmul": 1, "float_tail": 1, "lstm": 0}
