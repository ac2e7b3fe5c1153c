"""Graph surgery on the Kokoro int8 graph: tiny generated graphs in the shipped quantizer's pattern,
and the real model's derived runtime graph against the shipped one."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.engines.kokoro import model_files, optimize
from cosyedge.engines.kokoro.engine import make_session
from cosyedge.manifest import read_manifest, sha256_file, verify_files

RNG = np.random.default_rng(7)
OUT_SHAPE = ["n", "c", "t"]  # symbolic: outputs are compared to onnxruntime, not to declared shapes


def _init(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def quantized_conv_model(channels: int, out_channels: int, taps: int, *, dilation: int = 1, stride: int = 1,
                         pads: tuple[int, int] = (0, 0), bias: bool = True, name: str = "conv_quant") -> onnx.ModelProto:
    """x -> DynamicQuantizeLinear -> ConvInteger (uint8 weights, full range) [-> int32 bias Add via
    Div/Floor/Cast/Reshape] -> Cast -> Mul(x_scale * w_scale): the shipped model's exact pattern."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], name=name,
                              dilations=[dilation], strides=[stride], pads=list(pads), kernel_shape=[taps]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"])]
    inits = [_init("w", RNG.integers(0, 256, (out_channels, channels, taps), dtype=np.uint8)),
             _init("wz", np.uint8(RNG.integers(30, 100))), _init("ws", np.float32(0.004))]
    if bias:
        nodes += [helper.make_node("Div", ["b", "scale"], ["b_div"]),
                  helper.make_node("Floor", ["b_div"], ["b_floor"]),
                  helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32),
                  helper.make_node("Reshape", ["b_int", "b_shape"], ["b_r"]),
                  helper.make_node("Add", ["acc", "b_r"], ["acc_b"])]
        inits += [_init("b", RNG.normal(0, 0.5, out_channels).astype(np.float32)),
                  _init("b_shape", np.array([1, -1, 1], np.int64))]
    nodes += [helper.make_node("Cast", ["acc_b" if bias else "acc"], ["acc_f"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["acc_f", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feeds: dict, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def run_all(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def rewritten(model: onnx.ModelProto, passes) -> tuple[onnx.ModelProto, dict]:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    counts = optimize.rewrite(copy, passes)
    onnx.checker.check_model(copy)
    return copy, counts


CONV_SHAPES = [  # (C, M, k, dilation, stride, pads, bias): the kinds of convs the shipped model has
    (16, 8, 3, 1, 1, (1, 1), True),
    (8, 16, 1, 1, 1, (0, 0), False),
    (12, 12, 11, 5, 1, (25, 25), True),
    (6, 10, 12, 1, 6, (3, 3), True),
    (8, 8, 3, 1, 2, (1, 1), False),
    (4, 4, 5, 1, 1, (2, 2), True),
]


@pytest.mark.parametrize("channels,out_channels,taps,dilation,stride,pads,bias", CONV_SHAPES)
def test_conv_as_matmul_reproduces_convinteger_exactly(channels, out_channels, taps, dilation, stride, pads, bias):
    model = quantized_conv_model(channels, out_channels, taps, dilation=dilation, stride=stride, pads=pads,
                                 bias=bias)
    fast, counts = rewritten(model, ["conv_as_matmul"])
    assert counts == {"conv_as_matmul": 1}
    ops = [n.op_type for n in fast.graph.node]
    assert "ConvInteger" not in ops and "MatMulInteger" in ops and "Transpose" not in ops  # channel-first
    for length in (97, 40):  # the graph is length-agnostic
        x = RNG.uniform(-3, 2, (1, channels, length)).astype(np.float32)
        expected, got = run(model, {"x": x}), run(fast, {"x": x})
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)  # same integers, same float tail: bit-identical


@pytest.mark.parametrize("channels,out_channels,taps,dilation,stride,pads,bias", CONV_SHAPES)
def test_float_tail_is_within_one_accumulator_step_of_the_integer_tail(channels, out_channels, taps, dilation,
                                                                        stride, pads, bias):
    model = quantized_conv_model(channels, out_channels, taps, dilation=dilation, stride=stride, pads=pads,
                                 bias=bias, name="/decoder/conv_quant")
    fused, counts = rewritten(model, ["conv_as_matmul", "float_tail"])
    assert counts == {"conv_as_matmul": 1, "float_tail": 1}
    ops = [n.op_type for n in fused.graph.node]
    assert "MatMulIntegerToFloat" in ops and "MatMulInteger" not in ops and "Floor" not in ops
    assert ops.count("Cast") == 2  # only the activation and zero point to int8: no int32 -> float pass
    x = RNG.uniform(-3, 2, (1, channels, 83)).astype(np.float32)
    expected, got = run(model, {"x": x}), run(fused, {"x": x})
    assert got.shape == expected.shape
    # the int32 bias is floor(b / step) * step: the float bias differs by less than one step
    step = (max(x.max(), 0) - min(x.min(), 0)) / 255 * 0.004
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1.01 * step)
    assert not np.array_equal(got, expected) or not bias  # the bias really is added differently


def test_float_tail_leaves_convs_outside_the_decoder_alone():
    model = quantized_conv_model(8, 8, 3, pads=(1, 1), name="/encoder/text_encoder/conv_quant")
    _, counts = rewritten(model, ["conv_as_matmul", "float_tail"])
    assert counts == {"conv_as_matmul": 1, "float_tail": 0}  # durations depend on the text encoder


def adain_model(channels: int, eps: float = 1e-5, shared_stats: bool = False) -> onnx.ModelProto:
    """The exporter's AdaIN: y = gamma * (x - mean) / sqrt(var + eps) + beta over time, per channel
    (means by ReduceMean with an axes input, as in opset 18+). ``shared_stats``: two AdaINs reuse one
    set of statistics (as the generator's parallel resblocks do), which the pass leaves alone."""
    p = "/decoder/generator/adain/"
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], name=p + "ReduceMean"),
             helper.make_node("Sub", ["x", "m"], ["d"], name=p + "Sub"),
             helper.make_node("Mul", ["d", "d"], ["d2"], name=p + "Mul_2"),
             helper.make_node("ReduceMean", ["d2", "axes"], ["v"], name=p + "ReduceMean_2"),
             helper.make_node("Add", ["v", "eps"], ["ve"], name=p + "Add_2"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name=p + "Sqrt"),
             helper.make_node("Div", ["d", "sd"], ["n"], name=p + "Div_1"),
             helper.make_node("Mul", ["gamma", "n"], ["gn"], name=p + "Mul_3"),
             helper.make_node("Add", ["gn", "beta"], ["y"], name=p + "Add_3")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)]
    if shared_stats:
        nodes += [helper.make_node("Div", ["d", "sd"], ["n2"], name=p + "Div_other"),
                  helper.make_node("Add", ["n2", "beta"], ["y2"], name=p + "Add_other")]
        outputs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, OUT_SHAPE))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, None]),
              helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [1, channels, 1]),
              helper.make_tensor_value_info("beta", TensorProto.FLOAT, [1, channels, 1])]
    graph = helper.make_graph(nodes, "adain", inputs, outputs,
                              [_init("axes", np.array([2], np.int64)), _init("eps", np.float32(eps))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_instance_norm_replaces_the_decomposed_adain():
    model = adain_model(6)
    fused, counts = rewritten(model, ["instance_norm"])
    assert counts == {"instance_norm": 1}
    ops = [n.op_type for n in fused.graph.node]
    assert "InstanceNormalization" in ops and not {"ReduceMean", "Sqrt", "Div"} & set(ops)
    # small activations, so that a wrong epsilon shows; gamma and beta differ per channel
    feeds = {"x": RNG.normal(0.3, 0.004, (1, 6, 200)).astype(np.float32),
             "gamma": RNG.uniform(0.5, 2, (1, 6, 1)).astype(np.float32),
             "beta": RNG.normal(0, 1, (1, 6, 1)).astype(np.float32)}
    np.testing.assert_allclose(run(fused, feeds), run(model, feeds), rtol=1e-4, atol=1e-4)


def test_instance_norm_leaves_shared_statistics_alone():
    _, counts = rewritten(adain_model(4, shared_stats=True), ["instance_norm"])
    assert counts == {"instance_norm": 0}


def test_square_replaces_pow_two_exactly():
    nodes = [helper.make_node("Pow", ["x", "two"], ["x2"]), helper.make_node("Pow", ["x2", "three"], ["y"])]
    graph = helper.make_graph(nodes, "pow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
                              [_init("two", np.float32(2)), _init("three", np.float32(3))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fast, counts = rewritten(model, ["square"])
    assert counts == {"square": 1} and [n.op_type for n in fast.graph.node] == ["Mul", "Pow"]
    x = RNG.normal(0, 3, 1000).astype(np.float32)
    np.testing.assert_array_equal(run(fast, {"x": x}), run(model, {"x": x}))


def test_stft_as_conv_matches_the_stft_kernel():
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    nodes = [helper.make_node("STFT", ["s", "hop", "win", "n"], ["X"], name="/decoder/STFT", onesided=1),
             helper.make_node("Transpose", ["X"], ["Xt"], perm=[0, 2, 1, 3]),
             helper.make_node("Gather", ["Xt", "i0"], ["re"], axis=3),
             helper.make_node("Gather", ["Xt", "i1"], ["im"], axis=3)]
    graph = helper.make_graph(nodes, "stft", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, None])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", "b", "f"]) for n in ("re", "im")],
                              [_init("hop", np.int64(5)), _init("win", window), _init("n", np.int64(20)),
                               _init("i0", np.int64(0)), _init("i1", np.int64(1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    conv, counts = rewritten(model, ["stft_as_conv"])
    assert counts == {"stft_as_conv": 1} and "STFT" not in {n.op_type for n in conv.graph.node}
    x = RNG.normal(0, 1, (1, 203)).astype(np.float32)
    for expected, got in zip(run_all(model, {"s": x}), run_all(conv, {"s": x})):
        assert got.shape == expected.shape == (1, 11, 37)
        np.testing.assert_allclose(got, expected, atol=1e-4)  # the imaginary part's sign included


def test_spectral_distance_measures_level_changes_and_ignores_silence():
    t = np.arange(24_000) / 24_000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    assert optimize.spectral_distance_db(tone, tone) == 0.0
    assert optimize.spectral_distance_db(tone, 2 * tone) == pytest.approx(6.02, abs=0.01)
    quiet_noise = tone + RNG.normal(0, 1e-6, tone.size).astype(np.float32)  # 110 dB down: not "loud" bins
    assert optimize.spectral_distance_db(tone, quiet_noise) < 0.01
    with pytest.raises(ValueError, match="same length"):
        optimize.spectral_distance_db(tone, tone[:-1])


def test_conv_to_float_matches_dequantized_math():
    model = quantized_conv_model(16, 8, 3, pads=(1, 1))
    fp32, counts = rewritten(model, ["conv"])
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
    inits = [_init("b", RNG.integers(-127, 128, (k, n), dtype=np.int8)), _init("bz", np.zeros(n, np.int8)),
             _init("bs", RNG.uniform(0.001, 0.01, n).astype(np.float32))]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_to_float_matches_dequantized_math():
    model = quantized_matmul_model(32, 24)
    fp32, counts = rewritten(model, ["matmul"])
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
    inits = [_init("w", w_q), _init("r", r_q), _init("b", RNG.normal(0, 0.1, (2, 8 * hidden)).astype(np.float32)),
             _init("ws", np.array([0.01, 0.02], np.float32)), _init("wz", np.zeros(2, np.int8)),
             _init("rs", np.array([0.015, 0.01], np.float32)), _init("rz", np.zeros(2, np.int8))]
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1, features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s", "d", "b", "h"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    fp32, counts = rewritten(model, ["lstm"])
    assert counts == {"lstm": 1} and [n.op_type for n in fp32.graph.node] == ["LSTM"]
    x = RNG.uniform(-1, 1, (12, 1, features)).astype(np.float32)
    quantized, floated = run(model, {"x": x}), run(fp32, {"x": x})
    assert floated.shape == quantized.shape == (12, 2, 1, hidden)
    # only the activation quantization differs: a wrong gate order or layout gives ~100 % error
    assert np.linalg.norm(floated - quantized) / np.linalg.norm(quantized) < 0.03


def test_prune_drops_dead_nodes_initializers_and_shapes():
    model = quantized_conv_model(4, 4, 3, pads=(1, 1))
    fast, _ = rewritten(model, ["conv_as_matmul"])
    names = {t.name for t in fast.graph.initializer}
    assert "w" not in names and "conv/as_matmul/weight_m_kc" in names  # the [M, k*C] weight replaces it
    produced = {o for n in fast.graph.node for o in n.output}
    used = {i for n in fast.graph.node for i in n.input if i} | {o.name for o in fast.graph.output}
    assert produced <= used  # nothing computed for nobody
    assert names <= used


def test_rewrite_rejects_unknown_and_conflicting_passes():
    model = quantized_conv_model(4, 4, 3)
    with pytest.raises(ValueError, match="unknown passes"):
        optimize.rewrite(model, ["nope"])
    with pytest.raises(ValueError, match="pick one"):
        optimize.rewrite(model, ["conv", "conv_as_matmul"])


def test_derive_is_deterministic(tmp_path):
    source = tmp_path / "q.onnx"
    onnx.save(quantized_conv_model(8, 8, 7, dilation=3, pads=(9, 9)), source)
    optimize.derive(source, tmp_path / "a.onnx")
    optimize.derive(source, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


# --- the real model --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def assembled(kokoro_models_dir):
    """The session's real model directory, brought up to date by the (idempotent) setup step."""
    return model_files.assemble(kokoro_models_dir)


@pytest.mark.slow
def test_setup_derives_the_runtime_graph_with_its_hash(assembled):
    manifest = read_manifest(assembled, "hint")
    graph = manifest["runtime_graph"]
    assert graph["file"] == model_files.RUNTIME_NAME and graph["derived_from"] == model_files.ONNX_NAME
    assert graph["passes"] == list(model_files.RUNTIME_PASSES) and graph["version"] == model_files.RUNTIME_VERSION
    assert graph["rewritten_nodes"] == {"conv_as_matmul": 87, "square": 50, "float_tail": 68, "instance_norm": 52}
    assert manifest["files"][model_files.ONNX_NAME]["sha256"] == model_files.ONNX_SHA256  # source kept
    assert manifest["files"][model_files.RUNTIME_NAME]["sha256"] == sha256_file(assembled / model_files.RUNTIME_NAME)
    verify_files(assembled, manifest, "hint")
    ops = {n.op_type for n in onnx.load(str(assembled / model_files.RUNTIME_NAME), load_external_data=False).graph.node}
    assert "ConvInteger" not in ops and "Transpose" not in {n.op_type for n in
                                                            onnx.load(str(assembled / model_files.RUNTIME_NAME),
                                                                      load_external_data=False).graph.node
                                                            if n.name.startswith("/decoder/decoder/generator/res")}


def _zh_feeds(assembled) -> dict:
    """A fixed input unlike the setup check (other language, length, voice and speed)."""
    vocab = json.loads((assembled / model_files.VOCAB_NAME).read_text(encoding="utf-8"))["vocab"]
    phonemes = "ʨi→ntʰjɛ→n tʰjɛ→nʨʰi↘ ꭧə→n xau↓, wo↓mən ʨʰy↘ kʊ→ŋɥɛ↗n sa↘npu↘ pa."  # zh, tones
    ids = [vocab[c] for c in phonemes if c in vocab]
    with np.load(assembled / model_files.VOICES_NAME) as packs:
        style = packs["jm_kumo"][len(ids) - 1].reshape(1, 256).astype(np.float32)
    return {"tokens": np.array([[0, *ids, 0]], np.int64), "style": style, "speed": np.array([1.2], np.float32)}


@pytest.mark.slow
def test_exact_passes_reproduce_the_shipped_graph_bit_for_bit(assembled, tmp_path):
    """Tolerance: none. The exact passes, loaded as the engine loads the runtime graph, give the
    samples of the shipped graph as it was loaded before (all onnxruntime optimizations on)."""
    exact = tmp_path / "exact.onnx"
    optimize.derive(assembled / model_files.ONNX_NAME, exact, model_files.EXACT_PASSES)
    feeds = _zh_feeds(assembled)
    fast = make_session(exact, 2, "disable").run(None, feeds)[0]
    shipped = make_session(assembled / model_files.ONNX_NAME, 2, "all").run(None, feeds)[0]
    assert fast.shape == shipped.shape and fast.size > 24_000  # > 1 s of audio
    np.testing.assert_array_equal(fast, shipped)


@pytest.mark.slow
def test_runtime_graph_keeps_the_durations_and_stays_within_the_tolerance(assembled):
    """The runtime graph (with the approximate passes) on another input than the setup check: the
    same number of samples (same durations) and a band-energy distance under the tolerance; the
    measured distances are ~1 dB (docs/benchmarks.md), a broken rewrite gives 3-5 dB or more."""
    feeds = _zh_feeds(assembled)
    graph = read_manifest(assembled, "hint")["runtime_graph"]
    fast = make_session(assembled / graph["file"], 2, graph["graph_optimization"]).run(None, feeds)[0]
    shipped = make_session(assembled / model_files.ONNX_NAME, 2, "all").run(None, feeds)[0]
    assert fast.shape == shipped.shape and fast.size > 24_000
    assert optimize.spectral_distance_db(shipped, fast) < optimize.SPECTRAL_TOLERANCE_DB


@pytest.mark.slow
def test_setup_keeps_the_shipped_graph_when_the_check_fails(tmp_path, monkeypatch):
    def mismatch(*args):
        raise RuntimeError("differs on the check input")

    monkeypatch.setattr(optimize, "check_same_output", mismatch)
    target = model_files.assemble(tmp_path)
    manifest = read_manifest(target, "hint")
    assert manifest["runtime_graph"]["file"] == model_files.ONNX_NAME
    assert model_files.RUNTIME_NAME not in manifest["files"]
    assert not (target / model_files.RUNTIME_NAME).exists()


@pytest.mark.slow
def test_setup_keeps_the_exact_graph_when_the_tolerance_check_fails(tmp_path, monkeypatch):
    def too_far(*args, **kwargs):
        raise RuntimeError("3.4 dB from the shipped graph")

    monkeypatch.setattr(optimize, "check_close_output", too_far)
    target = model_files.assemble(tmp_path)
    graph = read_manifest(target, "hint")["runtime_graph"]
    assert graph["file"] == model_files.RUNTIME_NAME and graph["passes"] == list(model_files.EXACT_PASSES)
    assert graph["output_vs_shipped"] == "bit-identical"
    ops = {n.op_type for n in onnx.load(str(target / model_files.RUNTIME_NAME), load_external_data=False).graph.node}
    assert "MatMulIntegerToFloat" not in ops and "InstanceNormalization" not in ops
    assert [p.name for p in target.iterdir() if p.name.startswith(".")] == []  # no leftover candidate


@pytest.mark.slow
def test_engine_loads_the_runtime_graph_named_in_the_manifest(assembled, monkeypatch):
    from cosyedge.config import from_env
    from cosyedge.engines.kokoro import engine as engine_module

    opened = []
    real = engine_module.make_session

    def spy(path, threads, graph_optimization="all"):
        opened.append((path.name, graph_optimization))
        return real(path, threads, graph_optimization)

    monkeypatch.setattr(engine_module, "make_session", spy)
    engine = engine_module.KokoroEngine.load(assembled, from_env({}, onnx_threads=1))
    # setup checked the fused runner on this graph (step 3), so the engine runs it that way
    from cosyedge.engines.kokoro.fused_runtime import FusedSession

    assert isinstance(engine.session, FusedSession) and opened == []
    engine.close()
    manifest = read_manifest(assembled, "hint")
    graph = {k: v for k, v in manifest["runtime_graph"].items() if k != "runner"}
    assert engine_module.open_runtime(assembled, graph, 1) is not None
    assert opened == [(model_files.RUNTIME_NAME, "disable")]


def test_runtime_graph_missing_from_manifest_names_the_fix(tmp_path):
    from cosyedge.config import from_env
    from cosyedge.engines.kokoro.engine import KokoroEngine
    from cosyedge.errors import ModelMissingError

    (tmp_path / "manifest.json").write_text(json.dumps(
        {"engine": "kokoro", "files": {}, "runtime_graph": {"file": "elsewhere.onnx"}}))
    with pytest.raises(ModelMissingError, match="elsewhere.onnx.*setup-model"):
        KokoroEngine.load(tmp_path, from_env({}, onnx_threads=1))


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
    np.savez(voices, **{optimize.CHECK_VOICE: RNG.normal(0, 0.2, (510, 1, 256)).astype(np.float32)})
    shipped = tiny_kokoro.build(tmp_path / "shipped.onnx")
    near = _tiny_variant(shipped, tmp_path / "near.onnx", "base", 0.1001)  # 0.01 dB louder
    assert optimize.check_close_output(shipped, near, voices) < 0.05
    louder = _tiny_variant(shipped, tmp_path / "louder.onnx", "base", 0.2)  # ~6 dB
    with pytest.raises(RuntimeError, match="dB from shipped.onnx"):
        optimize.check_close_output(shipped, louder, voices)
    longer = _tiny_variant(shipped, tmp_path / "longer.onnx", "per_token", 650.0)
    with pytest.raises(RuntimeError, match="durations moved"):
        optimize.check_close_output(shipped, longer, voices)


def test_check_same_output_accepts_equal_and_rejects_different_graphs(tmp_path):
    from tests.helpers import tiny_kokoro

    voices = tmp_path / "voices.npz"
    np.savez(voices, **{optimize.CHECK_VOICE: RNG.normal(0, 0.2, (510, 1, 256)).astype(np.float32)})
    shipped = tiny_kokoro.build(tmp_path / "shipped.onnx")
    same = tiny_kokoro.build(tmp_path / "same.onnx")
    optimize.check_same_output(shipped, same, voices)  # no error

    model = onnx.load(str(shipped))
    for node in model.graph.node:  # the tiny model's output level: 0.1 + |mean(style)|
        if node.op_type == "Constant" and node.output[0] == "base":
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(0.1001, np.float32), "base"))
    onnx.save(model, tmp_path / "other.onnx")
    with pytest.raises(RuntimeError, match="differs from shipped.onnx"):
        optimize.check_same_output(shipped, tmp_path / "other.onnx", voices)
