"""Setup-time graph surgery on the Kokoro int8 graph (export/kokoro/optimize.py): tiny generated
graphs in the shipped quantizer's pattern, and the real model's derived runtime graph against the
shipped one (slow)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.engines.kokoro import model_files
from cosyedge.engines.kokoro.sessions import make_session
from cosyedge.export.kokoro import assembly, checks, optimize
from cosyedge.catalog.manifest import read_manifest

RNG = np.random.default_rng(7)
OUT_SHAPE = ["n", "c", "t"]  # symbolic: outputs are compared to onnxruntime, not to declared shapes


def tensor(name: str, value) -> onnx.TensorProto:
    """An initializer named ``name`` holding ``value``."""
    return numpy_helper.from_array(np.asarray(value), name)


def quantized_conv_model(channels: int, out_channels: int, taps: int, *, dilation: int = 1, stride: int = 1,
                         pads: tuple[int, int] = (0, 0), bias: bool = True, name: str = "conv_quant") -> onnx.ModelProto:
    """x -> DynamicQuantizeLinear -> ConvInteger (uint8 weights, full range) [-> int32 bias Add via
    Div/Floor/Cast/Reshape] -> Cast -> Mul(x_scale * w_scale): the shipped model's exact pattern."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], name=name,
                              dilations=[dilation], strides=[stride], pads=list(pads), kernel_shape=[taps]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"])]
    inits = [tensor("w", RNG.integers(0, 256, (out_channels, channels, taps), dtype=np.uint8)),
             tensor("wz", np.uint8(RNG.integers(30, 100))), tensor("ws", np.float32(0.004))]
    if bias:
        nodes += [helper.make_node("Div", ["b", "scale"], ["b_div"]),
                  helper.make_node("Floor", ["b_div"], ["b_floor"]),
                  helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32),
                  helper.make_node("Reshape", ["b_int", "b_shape"], ["b_r"]),
                  helper.make_node("Add", ["acc", "b_r"], ["acc_b"])]
        inits += [tensor("b", RNG.normal(0, 0.5, out_channels).astype(np.float32)),
                  tensor("b_shape", np.array([1, -1, 1], np.int64))]
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


def rewritten(model: onnx.ModelProto, passes, rewrite=optimize.rewrite) -> tuple[onnx.ModelProto, dict]:
    """A checked copy of ``model`` after ``rewrite(copy, passes)``, and the pass counts."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    counts = rewrite(copy, passes)
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
                              [tensor("axes", np.array([2], np.int64)), tensor("eps", np.float32(eps))])
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
                              [tensor("two", np.float32(2)), tensor("three", np.float32(3))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fast, counts = rewritten(model, ["square"])
    assert counts == {"square": 1} and [n.op_type for n in fast.graph.node] == ["Mul", "Pow"]
    x = RNG.normal(0, 3, 1000).astype(np.float32)
    np.testing.assert_array_equal(run(fast, {"x": x}), run(model, {"x": x}))


def test_prune_drops_dead_nodes_initializers_and_shapes():
    model = quantized_conv_model(4, 4, 3, pads=(1, 1))
    fast, _ = rewritten(model, ["conv_as_matmul"])
    names = {t.name for t in fast.graph.initializer}
    assert "w" not in names and "conv/as_matmul/weight_m_kc" in names  # the [M, k*C] weight replaces it
    produced = {o for n in fast.graph.node for o in n.output}
    used = {i for n in fast.graph.node for i in n.input if i} | {o.name for o in fast.graph.output}
    assert produced <= used  # nothing computed for nobody
    assert names <= used


def test_rewrite_rejects_unknown_passes():
    model = quantized_conv_model(4, 4, 3)
    with pytest.raises(ValueError, match="unknown passes"):
        optimize.rewrite(model, ["nope"])
    with pytest.raises(ValueError, match="unknown passes"):  # measured only: not among the product's passes
        optimize.rewrite(model, ["conv"])


def test_derive_is_deterministic(tmp_path):
    source = tmp_path / "q.onnx"
    onnx.save(quantized_conv_model(8, 8, 7, dilation=3, pads=(9, 9)), source)
    optimize.derive(source, tmp_path / "a.onnx")
    optimize.derive(source, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


# --- the real model --------------------------------------------------------------------------------

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
    optimize.derive(assembled / model_files.ONNX_NAME, exact, assembly.EXACT_PASSES)
    feeds = _zh_feeds(assembled)
    fast = make_session(exact, 2, "disable").run(None, feeds)[0]
    shipped = make_session(assembled / model_files.ONNX_NAME, 2, "all").run(None, feeds)[0]
    assert fast.shape == shipped.shape and fast.size > 24_000  # > 1 s of audio
    np.testing.assert_array_equal(fast, shipped)


@pytest.mark.slow
def test_runtime_graph_keeps_the_durations_and_stays_within_the_tolerance(assembled):
    """The runtime graph (with the approximate passes) on another input than the setup check: the
    same number of samples (same durations) and a band-energy distance under the tolerance; the
    measured distances are ~1 dB (docs/bench-log/kokoro.md), a broken rewrite gives 3-5 dB or more."""
    feeds = _zh_feeds(assembled)
    graph = read_manifest(assembled, "hint")["runtime_graph"]
    fast = make_session(assembled / graph["file"], 2, graph["graph_optimization"]).run(None, feeds)[0]
    shipped = make_session(assembled / model_files.ONNX_NAME, 2, "all").run(None, feeds)[0]
    assert fast.shape == shipped.shape and fast.size > 24_000
    assert checks.spectral_distance_db(shipped, fast) < checks.SPECTRAL_TOLERANCE_DB


def test_expose_durations_adds_the_length_regulators_durations_as_an_output_once():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Round", ["x"], ["r"]), helper.make_node("Clip", ["r", "lo"], ["c"]),
             helper.make_node("Cast", ["c"], ["d"], to=TensorProto.INT64),
             helper.make_node("Cast", ["x"], ["other"], to=TensorProto.INT64)]  # no Round before it: not it
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None]),
                                           helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("other", TensorProto.INT64, [1, None])])
    assert optimize.expose_durations(graph) == 1
    assert [o.name for o in graph.output] == ["other", model_files.DURATIONS_OUTPUT]
    assert graph.node[-1].input == ["d"]
    assert optimize.expose_durations(graph) == 0  # already there
    bare = helper.make_graph(nodes[3:], "g", graph.input, [graph.output[0]])
    assert optimize.expose_durations(bare) == 0


@pytest.mark.slow
def test_the_runtime_graphs_durations_cover_the_shipped_graphs_audio_exactly(assembled):
    feeds = _zh_feeds(assembled)
    graph = read_manifest(assembled, "hint")["runtime_graph"]
    session = make_session(assembled / graph["file"], 2, graph["graph_optimization"])
    audio, durations = session.run(["audio", model_files.DURATIONS_OUTPUT], feeds)
    shipped = make_session(assembled / model_files.ONNX_NAME, 2, "all").run(None, feeds)[0]
    assert durations.shape == feeds["tokens"].shape and durations.min() >= 1
    assert int(durations.sum()) * model_files.SAMPLES_PER_FRAME == audio.size == shipped.size
