"""Graph surgery on the shipped Kokoro int8 ONNX, run once at setup time (never at import or load).

The shipped model was dynamically quantized: weights int8/uint8, activations quantized at run time
by ``DynamicQuantizeLinear``. The vocoder's 87 ``ConvInteger`` nodes take about 60 % of the time,
and onnxruntime runs them as a u8u8 GEMM over weights it never prepacks. Passes here:

``conv_as_matmul`` (the one the product uses; see docs/benchmarks.md)
    each 1-D ``ConvInteger`` becomes im2col (Transpose, Pad, one strided Slice per tap, Concat) plus
    ``MatMulInteger`` with the weight as a constant int8 matrix, which onnxruntime prepacks and runs
    on its u8s8 (VNNI) kernels. Same integers, same activation quantization, same bias rounding:
    with onnxruntime's graph optimizations off the output is bit-identical to the shipped graph's
    (``check_same_output`` verifies that on the installing machine).
``conv`` / ``matmul`` / ``lstm``
    fold the int8 weights back into float32 ``Conv`` / ``MatMul`` / ``LSTM`` (weight =
    ``(q - zero_point) * scale``, float bias) and drop the activation quantization. Measured in
    bench/kokoro_rtf.py: slower on the VNNI machine we tried, 2.8-3.5x larger, not used.

Every pass works on an in-memory ``onnx.ModelProto`` and is deterministic, so the derived file's
sha256 is stable for a given source file and onnx version and can sit in the model manifest.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

if TYPE_CHECKING:  # onnx is needed only when a graph is derived (setup time)
    import onnx

logger = logging.getLogger(__name__)

PASSES = ("conv_as_matmul", "conv", "matmul", "lstm")


class _Graph:
    """Name indexes over one GraphProto plus the edits of one pass, applied together."""

    def __init__(self, graph: "onnx.GraphProto") -> None:
        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.producer: dict[str, "onnx.NodeProto"] = {}
        self.consumers: dict[str, list["onnx.NodeProto"]] = defaultdict(list)
        for node in graph.node:
            for out in node.output:
                self.producer[out] = node
            for name in node.input:
                self.consumers[name].append(node)
        self.new_inits: dict[str, np.ndarray] = {}
        self.replace: dict[int, list["onnx.NodeProto"]] = {}  # id(node) -> nodes in its place
        self.stale_shapes: set[str] = set()  # tensors whose recorded value_info no longer holds

    # --- reading -------------------------------------------------------------------------------
    def array(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        if name not in self.inits:
            raise ValueError(f"{name!r} is not an initializer")
        return numpy_helper.to_array(self.inits[name])

    def only_consumer(self, name: str, op_type: str) -> "onnx.NodeProto":
        users = self.consumers.get(name, [])
        if len(users) != 1 or users[0].op_type != op_type:
            raise ValueError(f"{name!r} should feed exactly one {op_type}, "
                             f"feeds {[u.op_type for u in users]}")
        return users[0]

    @staticmethod
    def other_input(node: "onnx.NodeProto", known: str) -> str:
        others = [name for name in node.input if name != known]
        if len(others) != 1:
            raise ValueError(f"{node.name} has an unexpected input list {list(node.input)}")
        return others[0]

    def weight_scale(self, scale_product: str) -> np.ndarray:
        """The weight's scale: the initializer operand of ``Mul(activation_scale, weight_scale)``."""
        node = self.producer.get(scale_product)
        if node is None or node.op_type != "Mul":
            raise ValueError(f"{scale_product!r} is not a scale product")
        found = [self.array(name) for name in node.input if name in self.inits]
        if len(found) != 1:
            raise ValueError(f"{node.name}: expected one initializer operand, got {len(found)}")
        return found[0].astype(np.float32)

    def float_source(self, quantized: str) -> str:
        """The float tensor that a ``DynamicQuantizeLinear`` turned into ``quantized``."""
        node = self.producer.get(quantized)
        if node is None or node.op_type != "DynamicQuantizeLinear":
            raise ValueError(f"{quantized!r} does not come from DynamicQuantizeLinear")
        return node.input[0]

    def quantized_tail(self, node: "onnx.NodeProto") -> tuple["onnx.NodeProto | None", "onnx.NodeProto",
                                                               "onnx.NodeProto"]:
        """The ``[Add(int32 bias)] -> Cast -> Mul(scale)`` nodes after an integer conv/matmul."""
        users = self.consumers.get(node.output[0], [])
        add = users[0] if len(users) == 1 and users[0].op_type == "Add" else None
        cast = self.only_consumer((add or node).output[0], "Cast")
        return add, cast, self.only_consumer(cast.output[0], "Mul")

    # --- editing -------------------------------------------------------------------------------
    def add_init(self, name: str, value: np.ndarray) -> str:
        """Register a new initializer (deduplicated by name: shared weights are folded once)."""
        if name in self.inits:
            raise ValueError(f"initializer name clash: {name!r}")
        self.new_inits.setdefault(name, np.ascontiguousarray(value))
        return name

    def apply(self) -> None:
        from onnx import numpy_helper

        nodes = []
        for node in self.graph.node:
            nodes.extend(self.replace.get(id(node), [node]))
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        for name, value in self.new_inits.items():
            self.graph.initializer.append(numpy_helper.from_array(value, name))
        infos = [v for v in self.graph.value_info if v.name not in self.stale_shapes]
        del self.graph.value_info[:]
        self.graph.value_info.extend(infos)


def _dequantize(q: np.ndarray, zero_point: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(q - zp) * scale`` in float32; the integers are exact in float32, only the product rounds."""
    return (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)


def _float_bias(g: _Graph, reshaped: str) -> str:
    """Follow Reshape <- Cast <- Floor <- Div(bias, scale) back to the float bias initializer."""
    node = g.producer.get(reshaped)
    for op in ("Reshape", "Cast", "Floor", "Div"):
        if node is None or node.op_type != op:
            raise ValueError(f"unexpected quantized-bias chain at {reshaped!r} (wanted {op})")
        if op == "Div":
            break
        node = g.producer.get(node.input[0])
    if node.input[0] not in g.inits:
        raise ValueError(f"{node.name}: the bias is not an initializer")
    return node.input[0]


def _conv_as_matmul(g: _Graph) -> int:
    """ConvInteger (u8 x u8)  ==>  Transpose/Pad/Slice/Concat im2col + MatMulInteger (u8 x s8)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "ConvInteger":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        w_u8 = g.array(node.input[1])
        if (w_u8.ndim != 3 or w_u8.dtype != np.uint8 or attrs.get("group", 1) != 1
                or attrs.get("auto_pad", b"NOTSET") != b"NOTSET"):
            logger.debug("leaving %s as ConvInteger (not a plain 1-D uint8 conv)", node.name)
            continue
        out_ch, in_ch, taps = w_u8.shape
        dilation = int(attrs.get("dilations", [1])[0])
        stride = int(attrs.get("strides", [1])[0])
        pad_lo, pad_hi = (int(p) for p in attrs.get("pads", [0, 0]))
        x_q, x_zp = node.input[0], node.input[2]
        w_zp = g.array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), np.uint8)
        prefix = node.name.removesuffix("_quant") + "/as_matmul/"

        # uint8 -> int8: subtract 128 from values and zero point, so (w - zp) is unchanged. Layout
        # [M, C, k] -> [k, C, M] -> [k*C, M]: row j*C + c meets tap j of channel c in the im2col.
        w_s8 = (w_u8.astype(np.int16) - 128).astype(np.int8).transpose(2, 1, 0).reshape(taps * in_ch, out_ch)
        w_name = g.add_init(prefix + "weight_kc_m", w_s8)
        zp_name = g.add_init(prefix + "weight_zero_point",
                             np.array(int(w_zp.reshape(-1)[0]) - 128, dtype=np.int8))

        new = [helper.make_node("Transpose", [x_q], [prefix + "x_tc"], name=prefix + "Transpose_in",
                                perm=[0, 2, 1])]
        cur = prefix + "x_tc"
        if pad_lo or pad_hi:  # pad with the activation's zero point, i.e. with real zeros
            pads = g.add_init(prefix + "pads", np.array([0, pad_lo, 0, 0, pad_hi, 0], np.int64))
            new.append(helper.make_node("Pad", [cur, pads, x_zp], [prefix + "x_pad"], name=prefix + "Pad"))
            cur = prefix + "x_pad"
        col = cur
        if taps > 1 or stride > 1:
            axis = g.add_init(prefix + "axis", np.array([1], np.int64))
            steps = g.add_init(prefix + "steps", np.array([stride], np.int64))
            span = dilation * (taps - 1)
            pieces = []
            for j in range(taps):  # tap j reads padded frames j*d, j*d + s, ... up to len - (span - j*d)
                rest = span - j * dilation
                start = g.add_init(prefix + f"start{j}", np.array([j * dilation], np.int64))
                end = g.add_init(prefix + f"end{j}", np.array([-rest if rest else np.iinfo(np.int64).max],
                                                              np.int64))
                pieces.append(prefix + f"tap{j}")
                new.append(helper.make_node("Slice", [cur, start, end, axis, steps], [pieces[-1]],
                                            name=prefix + f"Slice{j}"))
            col = pieces[0]
            if taps > 1:
                col = prefix + "col"
                new.append(helper.make_node("Concat", pieces, [col], name=prefix + "Concat", axis=2))
        acc = prefix + "acc"
        new.append(helper.make_node("MatMulInteger", [col, w_name, x_zp, zp_name], [acc],
                                    name=prefix + "MatMulInteger"))
        g.replace[id(node)] = new

        # Keep the model's own tail (int32 bias Add, Cast, scale Mul) on the [1, T', M] layout.
        add, cast, mul = g.quantized_tail(node)
        if add is not None:
            reshaped = g.other_input(add, node.output[0])
            reshape = g.producer.get(reshaped)
            if reshape is None or reshape.op_type != "Reshape":
                raise ValueError(f"{add.name}: expected the int32 bias to come through a Reshape")
            _rewire(add, {node.output[0]: acc, reshaped: reshape.input[0]})  # [M] broadcasts on T'xM
        else:
            _rewire(cast, {node.output[0]: acc})
        g.stale_shapes.update(n.output[0] for n in (add, cast) if n is not None)  # now [1, T', M]
        result = mul.output[0]
        mul.output[0] = prefix + "y_tc"
        g.replace[id(mul)] = [mul, helper.make_node("Transpose", [prefix + "y_tc"], [result],
                                                    name=prefix + "Transpose_out", perm=[0, 2, 1])]
        count += 1
    return count


def _rewire(node: "onnx.NodeProto", mapping: dict[str, str]) -> None:
    for i, name in enumerate(node.input):
        node.input[i] = mapping.get(name, name)


def _conv_to_float(g: _Graph) -> int:
    """ConvInteger [+ int32 bias Add] -> Cast -> Mul(scale)  ==>  float Conv(x, W, b)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "ConvInteger":
            continue
        w_q = g.array(node.input[1])
        zero = g.array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), np.float32)
        add, cast, mul = g.quantized_tail(node)
        scale = g.weight_scale(g.other_input(mul, cast.output[0]))
        if scale.size > 1:  # per output channel
            scale = scale.reshape(-1, *([1] * (w_q.ndim - 1)))
        inputs = [g.float_source(node.input[0]),
                  g.add_init(f"{node.input[1]}_dequantized", _dequantize(w_q, zero, scale))]
        if add is not None:
            inputs.append(_float_bias(g, g.other_input(add, node.output[0])))
        conv = helper.make_node("Conv", inputs, [mul.output[0]], name=node.name.removesuffix("_quant"))
        conv.attribute.extend(node.attribute)
        g.replace.update({id(node): [conv], id(cast): [], id(mul): []} | ({id(add): []} if add else {}))
        count += 1
    return count


def _matmul_to_float(g: _Graph) -> int:
    """MatMulInteger(a_q, B_q) -> Cast -> Mul(scale)  ==>  float MatMul(a, B)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "MatMulInteger":
            continue
        b_q = node.input[1]
        zero = g.array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), np.float32)
        add, cast, mul = g.quantized_tail(node)
        if add is not None:
            raise ValueError(f"{node.name}: an integer bias after MatMulInteger is not expected")
        scale = g.weight_scale(g.other_input(mul, cast.output[0]))  # [N] per column, or scalar
        weight = g.add_init(f"{b_q}_dequantized", _dequantize(g.array(b_q), zero, scale))
        matmul = helper.make_node("MatMul", [g.float_source(node.input[0]), weight], [mul.output[0]],
                                  name=node.name.removesuffix("_quant"))
        g.replace.update({id(node): [matmul], id(cast): [], id(mul): []})
        count += 1
    return count


def _lstm_to_float(g: _Graph) -> int:
    """com.microsoft DynamicQuantizeLSTM  ==>  ONNX LSTM with float W/R ``[D, 4H, in]``, gates iofc."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "DynamicQuantizeLSTM":
            continue
        padded = list(node.input) + [""] * (12 - len(node.input))
        x, w_q, r_q, b, seq, h0, c0, p, w_s, w_zp, r_s, r_zp = padded
        mats = []
        for q_name, s_name, zp_name in ((w_q, w_s, w_zp), (r_q, r_s, r_zp)):
            q = g.array(q_name)  # [D, in, 4H]
            directions = q.shape[0]
            scale = g.array(s_name).reshape(directions, 1, -1)  # [D] or [D, 4H]
            zero = g.array(zp_name).reshape(directions, 1, -1)
            mats.append(g.add_init(f"{q_name}_dequantized", _dequantize(q, zero, scale).transpose(0, 2, 1)))
        inputs = [x, mats[0], mats[1], b, seq, h0, c0, p]
        while inputs and not inputs[-1]:
            inputs.pop()
        lstm = helper.make_node("LSTM", inputs, list(node.output), name=node.name.removesuffix("_quant"))
        lstm.attribute.extend(node.attribute)
        g.replace[id(node)] = [lstm]
        count += 1
    return count


_PASS_FUNCS: dict[str, Callable[[_Graph], int]] = {
    "conv_as_matmul": _conv_as_matmul, "conv": _conv_to_float, "matmul": _matmul_to_float,
    "lstm": _lstm_to_float,
}


def prune(graph: "onnx.GraphProto") -> None:
    """Drop nodes whose outputs nobody needs, then unused initializers and stale value_info."""
    from onnx import AttributeProto

    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in graph.node for a in n.attribute):
        raise ValueError("prune() does not handle graphs with subgraphs")
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output if out):
            keep.append(node)
            needed.update(name for name in node.input if name)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    live = needed | {out for node in keep for out in node.output}
    infos = [v for v in graph.value_info if v.name in live]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def rewrite(model: "onnx.ModelProto", passes: Iterable[str]) -> dict[str, int]:
    """Apply ``passes`` to ``model`` in place (in PASSES order); return how many nodes each changed."""
    passes = tuple(passes)
    unknown = set(passes) - set(PASSES)
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}; choose from {PASSES}")
    if "conv_as_matmul" in passes and "conv" in passes:
        raise ValueError("'conv_as_matmul' and 'conv' both rewrite ConvInteger; pick one")
    counts = {}
    for name in PASSES:
        if name in passes:
            g = _Graph(model.graph)
            counts[name] = _PASS_FUNCS[name](g)
            g.apply()
    prune(model.graph)
    return counts


def derive(source: Path, target: Path, passes: Iterable[str] = ("conv_as_matmul",)) -> dict[str, int]:
    """Load ``source``, rewrite it, save it to ``target`` as one file; return the pass counts."""
    import onnx

    model = onnx.load(str(source))
    counts = rewrite(model, passes)
    onnx.save_model(model, str(target))
    logger.info("derived %s from %s: %s", Path(target).name, Path(source).name, counts)
    return counts


# A fixed input: "kʲoː βa ii teŋkʲi desɨ ne. sampo ɲi ikʲi maɕoː." (Japanese) as Kokoro vocab ids.
CHECK_TOKENS = (53, 164, 57, 158, 16, 75, 43, 16, 51, 51, 16, 62, 47, 112, 53, 164, 51, 16, 46, 47, 61,
                101, 16, 56, 47, 4, 16, 61, 43, 55, 58, 57, 16, 114, 51, 16, 51, 53, 164, 51, 16, 55, 43,
                77, 57, 158, 4)
CHECK_VOICE = "jf_alpha"


def check_same_output(shipped: Path, derived: Path, voices: Path) -> None:
    """Run both graphs on CHECK_TOKENS with graph optimizations off; raise RuntimeError unless the
    audio is bit-identical. A CPU whose int8 kernels saturate (u8s8 without VNNI) fails here."""
    import onnxruntime as ort

    with np.load(voices) as packs:
        style = packs[CHECK_VOICE][len(CHECK_TOKENS) - 1].reshape(1, 256).astype(np.float32)
    feeds = {"tokens": np.array([[0, *CHECK_TOKENS, 0]], dtype=np.int64), "style": style,
             "speed": np.array([1.0], dtype=np.float32)}
    outputs = []
    for path in (shipped, derived):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, feeds)[0])
    if outputs[0].shape != outputs[1].shape or not np.array_equal(outputs[0], outputs[1]):
        same_shape = outputs[0].shape == outputs[1].shape
        diff = float(np.max(np.abs(outputs[0] - outputs[1]))) if same_shape else None
        raise RuntimeError(f"{Path(derived).name} differs from {Path(shipped).name} on the check input "
                           f"(shapes {outputs[0].shape} vs {outputs[1].shape}, max abs diff {diff})")
