"""Graph surgery on the shipped Kokoro int8 ONNX, run once at setup time (never at import or load).

The shipped model was dynamically quantized: weights int8/uint8, activations quantized at run time
by ``DynamicQuantizeLinear``. The vocoder's 87 ``ConvInteger`` nodes take about 60 % of the time,
and onnxruntime runs them as a u8u8 GEMM over weights it never prepacks. The passes
(``assembly.EXACT_PASSES`` / ``APPROX_PASSES``; see docs/bench-log/kokoro.md):

``conv_as_matmul`` (exact)
    each 1-D ``ConvInteger`` becomes a channel-first im2col (Pad, one strided Slice per tap, Concat
    on the channel axis) plus ``MatMulInteger`` with the constant uint8 weight on the left and the
    activations shifted to int8 on the right: onnxruntime's u8s8 (VNNI) GEMM, no transposes. Same
    integers, same bias rounding: bit-identical with graph optimizations off.
``square`` (exact)
    ``Pow(x, 2)`` -> ``Mul(x, x)``.
``float_tail`` (approximate, decoder only)
    the conv's int32 bias Add, Cast and scale Mul fold into ``com.microsoft.MatMulIntegerToFloat``
    plus a float bias Add.
``instance_norm`` (approximate, decoder only)
    AdaIN's seven-op instance norm -> one ``InstanceNormalization``.

Every derived graph also gets the prosody predictor's per-token durations as a second output,
``durations`` (:func:`expose_durations`; the audio is unchanged), which the engine turns into word
times for captions.

The approximate passes leave the text encoder and prosody predictor alone (``DECODER_PREFIX``), so
the durations stay the shipped ones; ``checks.check_same_output`` / ``check_close_output`` verify a
derived graph on the installing machine. Passes that were measured and not kept (float
dequantization, the STFT as a Conv) are in ``measured_passes``, for the benchmarks.

Every pass works on an in-memory ``onnx.ModelProto`` and is deterministic, so the derived file's
sha256 is stable for a given source file and onnx version and can sit in the model manifest.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import numpy as np

from cosyedge.engines.kokoro.graph_index import GraphIndex
from cosyedge.engines.kokoro.model_files import DURATIONS_OUTPUT

if TYPE_CHECKING:  # onnx is imported where a graph is read or written
    import onnx

logger = logging.getLogger(__name__)

# The approximate passes touch only the decoder (F0/energy -> audio), never the text encoder or the
# prosody predictor, so the predicted durations stay exactly those of the shipped graph.
DECODER_PREFIX = "/decoder/"


class GraphEdit(GraphIndex):
    """The index of one GraphProto plus the edits of one pass, applied together by :meth:`apply`."""

    def __init__(self, graph: "onnx.GraphProto") -> None:
        super().__init__(graph)
        self.new_inits: dict[str, np.ndarray] = {}
        self.replace: dict[int, list["onnx.NodeProto"]] = {}  # id(node) -> nodes in its place

    # --- reading the quantizer's patterns ----------------------------------------------------
    def weight_scale(self, scale_product: str) -> np.ndarray:
        """The weight's scale: the initializer operand of ``Mul(activation_scale, weight_scale)``."""
        node = self.producer.get(scale_product)
        if node is None or node.op_type != "Mul":
            raise ValueError(f"{scale_product!r} is not a scale product")
        found = [self.const(name) for name in node.input if name in self.inits]
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
        users = self.users(node.output[0])
        add = users[0] if len(users) == 1 and users[0].op_type == "Add" else None
        cast = self.only_user((add or node).output[0], "Cast")
        return add, cast, self.only_user(cast.output[0], "Mul")

    # --- editing -------------------------------------------------------------------------------
    def add_init(self, name: str, value: np.ndarray) -> str:
        """Register a new initializer (deduplicated by name: shared weights are folded once)."""
        if name in self.inits:
            raise ValueError(f"initializer name clash: {name!r}")
        self.new_inits.setdefault(name, np.ascontiguousarray(value))
        return name

    def apply(self) -> None:
        """Put the replacement nodes in place of the replaced ones and add the new initializers."""
        from onnx import numpy_helper

        nodes = []
        for node in self.graph.node:
            nodes.extend(self.replace.get(id(node), [node]))
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        for name, value in self.new_inits.items():
            self.graph.initializer.append(numpy_helper.from_array(value, name))


Pass = Callable[[GraphEdit], int]


def float_bias(g: GraphEdit, reshaped: str) -> str:
    """Follow [Reshape <-] Cast <- Floor <- Div(bias, scale) back to the float bias initializer."""
    node = g.producer.get(reshaped)
    chain = ("Reshape", "Cast", "Floor", "Div") if node is not None and node.op_type == "Reshape" else (
        "Cast", "Floor", "Div")
    for op in chain:
        if node is None or node.op_type != op:
            raise ValueError(f"unexpected quantized-bias chain at {reshaped!r} (wanted {op})")
        if op == "Div":
            break
        node = g.producer.get(node.input[0])
    if node.input[0] not in g.inits:
        raise ValueError(f"{node.name}: the bias is not an initializer")
    return node.input[0]


def _conv_as_matmul(g: GraphEdit) -> int:
    """ConvInteger (u8 x u8)  ==>  im2col (Pad, one strided Slice per tap, Concat) + MatMulInteger
    with the constant uint8 weight as the left operand and the activations as int8.

    Layout stays channel-first: ``y[1, M, T'] = W[M, k*C] @ col[1, k*C, T']`` where ``col`` stacks
    the k shifted copies of ``x[1, C, T]`` on the channel axis, so the im2col is k large contiguous
    copies and there is no transpose before or after. onnxruntime's fast int8 GEMM (u8 x s8, VNNI
    here) wants the right operand signed, so the activations are shifted to int8 (uint8 ``x - 128``
    wraps, and read as int8 it is ``x - 128``; the zero point moves with them, so ``x - zp`` is
    unchanged). The
    model's own tail (int32 bias Add, Cast, scale Mul) keeps its input name, shape and values."""
    from onnx import TensorProto, helper

    count = 0
    as_int8: dict[str, tuple[str, str]] = {}  # uint8 activation -> (int8 activation, int8 zero point)
    for node in list(g.graph.node):
        if node.op_type != "ConvInteger":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        w_u8 = g.const(node.input[1])
        if (w_u8.ndim != 3 or w_u8.dtype != np.uint8 or attrs.get("group", 1) != 1
                or attrs.get("auto_pad", b"NOTSET") != b"NOTSET"):
            logger.debug("leaving %s as ConvInteger (not a plain 1-D uint8 conv)", node.name)
            continue
        out_ch, in_ch, taps = w_u8.shape
        dilation = int(attrs.get("dilations", [1])[0])
        stride = int(attrs.get("strides", [1])[0])
        pad_lo, pad_hi = (int(p) for p in attrs.get("pads", [0, 0]))
        x_q, x_zp = node.input[0], node.input[2]
        w_zp = node.input[3] if len(node.input) > 3 and node.input[3] else g.add_init(
            node.name + "/as_matmul/weight_zero_point", np.zeros((), np.uint8))
        prefix = node.name.removesuffix("_quant") + "/as_matmul/"
        new = []

        if x_q not in as_int8:  # one conversion per activation, shared by the convs that read it
            half = g.add_init(prefix + "half_range", np.array(128, np.uint8))
            for name in (x_q, x_zp):  # uint8 x - 128 wraps (mod 256); read as int8 it is exactly x - 128
                new += [helper.make_node("Sub", [name, half], [prefix + _base(name) + "_shifted"],
                                         name=prefix + "Sub_" + _base(name)),
                        helper.make_node("Cast", [prefix + _base(name) + "_shifted"], [prefix + _base(name) + "_s8"],
                                         name=prefix + "Cast_" + _base(name), to=TensorProto.INT8)]
            as_int8[x_q] = (prefix + _base(x_q) + "_s8", prefix + _base(x_zp) + "_s8")
        cur, zp_s8 = as_int8[x_q]
        if pad_lo or pad_hi:  # pad with the activation's zero point, i.e. with real zeros
            pads = g.add_init(prefix + "pads", np.array([0, 0, pad_lo, 0, 0, pad_hi], np.int64))
            new.append(helper.make_node("Pad", [cur, pads, zp_s8], [prefix + "x_pad"], name=prefix + "Pad"))
            cur = prefix + "x_pad"
        col = cur
        if taps > 1 or stride > 1:
            axis = g.add_init(prefix + "axis", np.array([2], np.int64))
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
                new.append(helper.make_node("Concat", pieces, [col], name=prefix + "Concat", axis=1))
        # Row m of the weight meets tap j of channel c at column j*C + c, as the Concat stacks them.
        w_name = g.add_init(prefix + "weight_m_kc", w_u8.transpose(0, 2, 1).reshape(out_ch, taps * in_ch))
        new.append(helper.make_node("MatMulInteger", [w_name, col, w_zp, zp_s8], [node.output[0]],
                                    name=prefix + "MatMulInteger"))
        g.replace[id(node)] = new
        count += 1
    return count


def _base(name: str) -> str:
    """The last path component of a tensor name (for readable derived names)."""
    return name.rsplit("/", 1)[-1]


def _float_tail(g: GraphEdit) -> int:
    """conv_as_matmul's ``MatMulInteger [-> Add(int32 bias)] -> Cast -> Mul(x_scale * w_scale)``  ==>
    com.microsoft ``MatMulIntegerToFloat`` (both scales applied in the GEMM's output stage)
    [``-> Add(float bias [M, 1])``]: two full passes over each conv output fewer.

    Not bit-identical: the shipped graph adds the bias as ``floor(b / scale)`` in int32 before
    scaling, this adds ``b`` in float after it (they differ by less than one accumulator step,
    ``x_scale * w_scale``, per sample). Decoder convs only (see DECODER_PREFIX)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if (node.op_type != "MatMulInteger" or not node.name.endswith("/as_matmul/MatMulInteger")
                or not node.name.startswith(DECODER_PREFIX)):
            continue
        add, cast, mul = g.quantized_tail(node)
        product = g.other_input(mul, cast.output[0])
        scale_node = g.producer.get(product)
        if scale_node is None or scale_node.op_type != "Mul":
            raise ValueError(f"{mul.name}: {product!r} is not a scale product")
        x_scale = [name for name in scale_node.input if name not in g.inits]
        if len(x_scale) != 1:
            raise ValueError(f"{scale_node.name}: expected one run-time (activation) scale")
        w_scale = g.weight_scale(product)
        if w_scale.size != 1:
            raise ValueError(f"{node.name}: a per-channel weight scale is not supported here")
        prefix = node.name.removesuffix("MatMulInteger")
        weight, col, w_zp, x_zp = node.input
        inputs = [weight, col, g.add_init(prefix + "weight_scale", w_scale.reshape(())), x_scale[0], w_zp, x_zp]
        out = mul.output[0] if add is None else prefix + "y_nobias"
        new = [helper.make_node("MatMulIntegerToFloat", inputs, [out], domain="com.microsoft",
                                name=prefix + "MatMulIntegerToFloat")]
        if add is not None:
            bias = g.const(float_bias(g, g.other_input(add, node.output[0]))).astype(np.float32)
            new.append(helper.make_node("Add", [out, g.add_init(prefix + "bias_m1", bias.reshape(-1, 1))],
                                        [mul.output[0]], name=prefix + "Add_bias"))
        g.replace.update({id(node): new, id(cast): [], id(mul): []} | ({id(add): []} if add else {}))
        count += 1
    return count


def _instance_norm(g: GraphEdit) -> int:
    """AdaIN's decomposed instance norm in the decoder  ==>  one ``InstanceNormalization``::

        m = ReduceMean(x, [2]); d = x - m; v = ReduceMean(d * d, [2]); n = d / Sqrt(v + eps)
        y = gamma * n + beta          (gamma, beta: [1, C, 1], from the style vector)

    becomes ``InstanceNormalization(x, gamma[C], beta[C], epsilon=eps)``: the same statistics and
    formula in one kernel instead of seven full passes. Not bit-identical (summation order). The
    per-channel scale/bias are flattened to [C], which holds for the engine's batch of one."""
    from onnx import helper

    def axes_are_time(node) -> bool:
        axes = g.value(node.input[1]) if len(node.input) > 1 else None
        keep = {a.name: a.i for a in node.attribute}.get("keepdims", 1)
        return axes is not None and axes.reshape(-1).tolist() in ([2], [-1]) and keep == 1

    count = 0
    for mean in list(g.graph.node):
        if mean.op_type != "ReduceMean" or not mean.name.startswith(DECODER_PREFIX) or not axes_are_time(mean):
            continue
        x = mean.input[0]
        sub = g.users(mean.output[0])
        if len(sub) != 1 or sub[0].op_type != "Sub" or list(sub[0].input) != [x, mean.output[0]]:
            continue
        sub = sub[0]
        d_users = g.users(sub.output[0])
        square = [n for n in d_users if n.op_type == "Mul" and list(n.input) == [sub.output[0]] * 2]
        div = [n for n in d_users if n.op_type == "Div" and n.input[0] == sub.output[0]]
        if len(d_users) != 2 or len(square) != 1 or len(div) != 1:
            continue
        var = g.users(square[0].output[0])
        if len(var) != 1 or var[0].op_type != "ReduceMean" or not axes_are_time(var[0]):
            continue
        add_eps = g.users(var[0].output[0])
        if len(add_eps) != 1 or add_eps[0].op_type != "Add":
            continue
        eps = g.value(g.other_input(add_eps[0], var[0].output[0]))
        sqrt = g.users(add_eps[0].output[0])
        if eps is None or eps.size != 1 or len(sqrt) != 1 or sqrt[0].op_type != "Sqrt" \
                or div[0].input[1] != sqrt[0].output[0]:
            continue
        scale = g.users(div[0].output[0])
        if len(scale) != 1 or scale[0].op_type != "Mul":
            continue
        shift = g.users(scale[0].output[0])
        if len(shift) != 1 or shift[0].op_type != "Add":
            continue
        gamma = g.other_input(scale[0], div[0].output[0])
        beta = g.other_input(shift[0], scale[0].output[0])
        prefix = mean.name.rsplit("/", 1)[0] + "/instance_norm/"
        flat = g.add_init(prefix + "flat", np.array([-1], np.int64))
        new = [helper.make_node("Reshape", [gamma, flat], [prefix + "gamma"], name=prefix + "Reshape_gamma"),
               helper.make_node("Reshape", [beta, flat], [prefix + "beta"], name=prefix + "Reshape_beta"),
               helper.make_node("InstanceNormalization", [x, prefix + "gamma", prefix + "beta"],
                                [shift[0].output[0]], name=prefix + "InstanceNormalization",
                                epsilon=float(eps.reshape(-1)[0]))]
        g.replace[id(mean)] = new
        for node in (sub, square[0], var[0], add_eps[0], sqrt[0], div[0], scale[0], shift[0]):
            g.replace[id(node)] = []
        count += 1
    return count


def _square(g: GraphEdit) -> int:
    """``Pow(x, 2)``  ==>  ``Mul(x, x)`` (the Snake activations' sin^2): the same product, a cheaper
    kernel than the general power."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "Pow":
            continue
        exponent = g.value(node.input[1])
        if exponent is None or exponent.size != 1 or float(exponent.reshape(-1)[0]) != 2.0:
            continue
        g.replace[id(node)] = [helper.make_node("Mul", [node.input[0], node.input[0]], list(node.output),
                                                name=node.name + "_as_mul")]
        count += 1
    return count


#: The product's passes, in the order they are applied.
PASS_FUNCS: dict[str, Pass] = {
    "conv_as_matmul": _conv_as_matmul, "float_tail": _float_tail, "instance_norm": _instance_norm, "square": _square,
}
PASSES = tuple(PASS_FUNCS)


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


def expose_durations(graph: "onnx.GraphProto") -> int:
    """Add the prosody predictor's per-token durations as the graph output ``durations`` (int64
    [1, N+2], frames of ``model_files.SAMPLES_PER_FRAME`` samples), for word captions: the
    ``Round -> Clip -> Cast`` that the length regulator reads. Changes no other output; 0 when the
    graph has no such chain (or has the output already), else 1."""
    from onnx import TensorProto, helper

    if any(o.name == DURATIONS_OUTPUT for o in graph.output):
        return 0
    producer = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        clip = producer.get(node.input[0]) if node.op_type == "Cast" and node.input else None
        rounded = producer.get(clip.input[0]) if clip is not None and clip.op_type == "Clip" else None
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if rounded is not None and rounded.op_type == "Round" and to == TensorProto.INT64:
            graph.node.append(helper.make_node("Identity", [node.output[0]], [DURATIONS_OUTPUT],
                                               name="durations/expose"))
            graph.output.append(helper.make_tensor_value_info(DURATIONS_OUTPUT, TensorProto.INT64, [1, None]))
            return 1
    return 0


def rewrite(model: "onnx.ModelProto", passes: Iterable[str], funcs: Mapping[str, Pass] = PASS_FUNCS) -> dict[str, int]:
    """Apply ``passes`` to ``model`` in place (in the order of ``funcs``, the passes by name);
    return how many nodes each changed."""
    passes = tuple(passes)
    unknown = set(passes) - set(funcs)
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}; choose from {tuple(funcs)}")
    counts = {}
    for name, func in funcs.items():
        if name in passes:
            g = GraphEdit(model.graph)
            counts[name] = func(g)
            g.apply()
    prune(model.graph)
    domains = {o.domain for o in model.opset_import}
    if any(n.domain == "com.microsoft" for n in model.graph.node) and "com.microsoft" not in domains:
        from onnx import helper

        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))  # MatMulIntegerToFloat
    return counts


def derive(source: Path, target: Path, passes: Iterable[str] = ("conv_as_matmul",),
           funcs: Mapping[str, Pass] = PASS_FUNCS) -> dict[str, int]:
    """Load ``source``, rewrite it (:func:`rewrite`), expose its durations (:func:`expose_durations`),
    save it to ``target`` as one file; return the pass counts (``durations_output``: 1 when exposed)."""
    import onnx

    model = onnx.load(str(source))
    counts = rewrite(model, passes, funcs)
    counts["durations_output"] = expose_durations(model.graph)
    onnx.save_model(model, str(target))
    logger.info("derived %s from %s: %s", Path(target).name, Path(source).name, counts)
    return counts
