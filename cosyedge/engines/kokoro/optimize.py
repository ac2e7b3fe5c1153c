"""Graph surgery on the shipped Kokoro int8 ONNX, run once at setup time (never at import or load).

The shipped model was dynamically quantized: weights int8/uint8, activations quantized at run time
by ``DynamicQuantizeLinear``. The vocoder's 87 ``ConvInteger`` nodes take about 60 % of the time,
and onnxruntime runs them as a u8u8 GEMM over weights it never prepacks. Passes here:

Used by the product (``model_files.EXACT_PASSES`` / ``APPROX_PASSES``; see docs/benchmarks.md):

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

Measured only, not used:

``stft_as_conv``
    the vocoder source's STFT as one strided Conv with a DFT basis: correct to float rounding, but
    the phase that follows (atan of im/re) amplifies that rounding to a 2.5-3.3 dB change.
``conv`` / ``matmul`` / ``lstm``
    fold the int8 weights back into float32 ``Conv`` / ``MatMul`` / ``LSTM`` (weight =
    ``(q - zero_point) * scale``, float bias) and drop the activation quantization: slower on the
    VNNI machine we tried, 2.8-3.5x larger.

The approximate passes leave the text encoder and prosody predictor alone (``DECODER_PREFIX``), so
the durations stay the shipped ones; ``check_same_output`` / ``check_close_output`` verify a
derived graph on the installing machine.

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

PASSES = ("conv_as_matmul", "float_tail", "instance_norm", "square", "stft_as_conv", "conv", "matmul", "lstm")
# The approximate passes touch only the decoder (F0/energy -> audio), never the text encoder or the
# prosody predictor, so the predicted durations stay exactly those of the shipped graph.
DECODER_PREFIX = "/decoder/"


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


def _conv_as_matmul(g: _Graph) -> int:
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


def _float_tail(g: _Graph) -> int:
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
            bias = g.array(_float_bias(g, g.other_input(add, node.output[0]))).astype(np.float32)
            new.append(helper.make_node("Add", [out, g.add_init(prefix + "bias_m1", bias.reshape(-1, 1))],
                                        [mul.output[0]], name=prefix + "Add_bias"))
        g.replace.update({id(node): new, id(cast): [], id(mul): []} | ({id(add): []} if add else {}))
        count += 1
    return count


def _constant(g: _Graph, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant-node output, else None."""
    if name in g.inits:
        return g.array(name)
    node = g.producer.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
        from onnx import numpy_helper

        return numpy_helper.to_array(node.attribute[0].t)
    return None


def _instance_norm(g: _Graph) -> int:
    """AdaIN's decomposed instance norm in the decoder  ==>  one ``InstanceNormalization``::

        m = ReduceMean(x, [2]); d = x - m; v = ReduceMean(d * d, [2]); n = d / Sqrt(v + eps)
        y = gamma * n + beta          (gamma, beta: [1, C, 1], from the style vector)

    becomes ``InstanceNormalization(x, gamma[C], beta[C], epsilon=eps)``: the same statistics and
    formula in one kernel instead of seven full passes. Not bit-identical (summation order). The
    per-channel scale/bias are flattened to [C], which holds for the engine's batch of one."""
    from onnx import helper

    def users(name: str) -> list:  # each consuming node once (Mul(d, d) is listed per input)
        return list({id(n): n for n in g.consumers.get(name, [])}.values())

    def axes_are_time(node) -> bool:
        axes = _constant(g, node.input[1]) if len(node.input) > 1 else None
        keep = {a.name: a.i for a in node.attribute}.get("keepdims", 1)
        return axes is not None and axes.reshape(-1).tolist() in ([2], [-1]) and keep == 1

    count = 0
    for mean in list(g.graph.node):
        if mean.op_type != "ReduceMean" or not mean.name.startswith(DECODER_PREFIX) or not axes_are_time(mean):
            continue
        x = mean.input[0]
        sub = users(mean.output[0])
        if len(sub) != 1 or sub[0].op_type != "Sub" or list(sub[0].input) != [x, mean.output[0]]:
            continue
        sub = sub[0]
        d_users = users(sub.output[0])
        square = [n for n in d_users if n.op_type == "Mul" and list(n.input) == [sub.output[0]] * 2]
        div = [n for n in d_users if n.op_type == "Div" and n.input[0] == sub.output[0]]
        if len(d_users) != 2 or len(square) != 1 or len(div) != 1:
            continue
        var = users(square[0].output[0])
        if len(var) != 1 or var[0].op_type != "ReduceMean" or not axes_are_time(var[0]):
            continue
        add_eps = users(var[0].output[0])
        if len(add_eps) != 1 or add_eps[0].op_type != "Add":
            continue
        eps = _constant(g, g.other_input(add_eps[0], var[0].output[0]))
        sqrt = users(add_eps[0].output[0])
        if eps is None or eps.size != 1 or len(sqrt) != 1 or sqrt[0].op_type != "Sqrt" \
                or div[0].input[1] != sqrt[0].output[0]:
            continue
        scale = users(div[0].output[0])
        if len(scale) != 1 or scale[0].op_type != "Mul":
            continue
        shift = users(scale[0].output[0])
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


def _square(g: _Graph) -> int:
    """``Pow(x, 2)``  ==>  ``Mul(x, x)`` (the Snake activations' sin^2): the same product, a cheaper
    kernel than the general power."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "Pow":
            continue
        exponent = _constant(g, node.input[1])
        if exponent is None or exponent.size != 1 or float(exponent.reshape(-1)[0]) != 2.0:
            continue
        g.replace[id(node)] = [helper.make_node("Mul", [node.input[0], node.input[0]], list(node.output),
                                                name=node.name + "_as_mul")]
        count += 1
    return count


def _stft_as_conv(g: _Graph) -> int:
    """``STFT(signal, hop, window, n) -> Transpose(0, 2, 1, 3) -> Gather(axis 3, 0 | 1)`` (real and
    imaginary parts, ``[N, bins, frames]``)  ==>  one strided ``Conv`` with the windowed DFT basis as
    its ``[2 * bins, 1, n]`` weight, ``Split`` into the two parts.

    The iSTFTNet source's STFT (n = 20, hop 5) is a tiny DFT per frame that onnxruntime's STFT kernel
    runs frame by frame; as a Conv it is one small GEMM. The same sums in another order: not
    bit-identical. Only a constant window/hop/length, onesided output and this exact consumer
    pattern are rewritten."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "STFT" or len(node.input) < 3:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        hop = _constant(g, node.input[1])
        window = _constant(g, node.input[2])
        length = _constant(g, node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if attrs.get("onesided", 1) != 1 or hop is None or window is None or window.ndim != 1:
            continue
        n_fft = window.size
        if length is not None and int(length) != n_fft:
            continue
        users = list({id(n): n for n in g.consumers.get(node.output[0], [])}.values())
        if len(users) != 1 or users[0].op_type != "Transpose" or \
                list(helper.get_attribute_value(users[0].attribute[0])) != [0, 2, 1, 3]:
            continue
        transpose = users[0]
        parts: dict[int, "onnx.NodeProto"] = {}
        for gather in {id(n): n for n in g.consumers.get(transpose.output[0], [])}.values():
            index = _constant(g, gather.input[1]) if gather.op_type == "Gather" else None
            axis = {a.name: a.i for a in gather.attribute}.get("axis", 0) if gather.op_type == "Gather" else None
            if index is None or index.ndim != 0 or axis not in (3, -1) or int(index) in parts:
                parts = {}
                break
            parts[int(index)] = gather
        if sorted(parts) != [0, 1]:
            continue
        bins = n_fft // 2 + 1
        k = np.arange(bins)[:, None]
        t = np.arange(n_fft)[None, :]
        angle = 2 * np.pi * k * t / n_fft
        basis = np.concatenate([window * np.cos(angle), -window * np.sin(angle)]).astype(np.float32)
        prefix = node.name + "/as_conv/"
        shape = g.add_init(prefix + "signal_shape", np.array([0, 1, -1], np.int64))
        split = g.add_init(prefix + "split", np.array([bins, bins], np.int64))
        new = [helper.make_node("Reshape", [node.input[0], shape], [prefix + "signal"], name=prefix + "Reshape"),
               helper.make_node("Conv", [prefix + "signal", g.add_init(prefix + "dft_basis", basis[:, None, :])],
                                [prefix + "spectrum"], name=prefix + "Conv", kernel_shape=[n_fft],
                                strides=[int(hop)]),
               helper.make_node("Split", [prefix + "spectrum", split], [parts[0].output[0], parts[1].output[0]],
                                name=prefix + "Split", axis=1)]
        g.replace.update({id(node): new, id(transpose): [], id(parts[0]): [], id(parts[1]): []})
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
    "conv_as_matmul": _conv_as_matmul, "float_tail": _float_tail, "instance_norm": _instance_norm,
    "square": _square, "stft_as_conv": _stft_as_conv, "conv": _conv_to_float, "matmul": _matmul_to_float,
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
    domains = {o.domain for o in model.opset_import}
    if any(n.domain == "com.microsoft" for n in model.graph.node) and "com.microsoft" not in domains:
        from onnx import helper

        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))  # MatMulIntegerToFloat
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


def check_feeds(voices: Path) -> dict[str, np.ndarray]:
    """The model inputs for CHECK_TOKENS in CHECK_VOICE at speed 1."""
    with np.load(voices) as packs:
        style = packs[CHECK_VOICE][len(CHECK_TOKENS) - 1].reshape(1, 256).astype(np.float32)
    return {"tokens": np.array([[0, *CHECK_TOKENS, 0]], dtype=np.int64), "style": style,
            "speed": np.array([1.0], dtype=np.float32)}


def check_audio(graph: Path, voices: Path) -> np.ndarray:
    """A graph's audio for CHECK_TOKENS (1 thread, graph optimizations off, as the engine loads it)."""
    import onnxruntime as ort

    feeds = check_feeds(voices)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(graph), sess_options=opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].reshape(-1)


def _reference(shipped: Path | np.ndarray, voices: Path) -> tuple[np.ndarray, str]:
    if isinstance(shipped, np.ndarray):  # the shipped graph's check audio, computed once by the caller
        return shipped, "the shipped graph"
    return check_audio(shipped, voices), Path(shipped).name


def check_same_output(shipped: Path | np.ndarray, derived: Path, voices: Path) -> None:
    """Run ``derived`` on CHECK_TOKENS (and ``shipped``, unless its check audio is passed) with graph
    optimizations off; raise RuntimeError unless the audio is bit-identical. A CPU whose int8
    kernels saturate (u8s8 without VNNI) fails here."""
    reference, name = _reference(shipped, voices)
    audio = check_audio(derived, voices)
    if reference.shape != audio.shape or not np.array_equal(reference, audio):
        same_shape = reference.shape == audio.shape
        diff = float(np.max(np.abs(reference - audio))) if same_shape else None
        raise RuntimeError(f"{Path(derived).name} differs from {name} on the check input "
                           f"(shapes {reference.shape} vs {audio.shape}, max abs diff {diff})")


# The approximate passes move the audio as much as multiplying the decoder's half of the style vector
# by 1 + 1e-6 does (0.8-1.0 dB; docs/benchmarks.md): the vocoder amplifies any rounding change to
# that level and no further. A broken rewrite (a lost bias, a wrong norm) lands far above this bound.
SPECTRAL_TOLERANCE_DB = 2.0
_LOUD_RANGE_DB = 50.0


def spectral_distance_db(reference: np.ndarray, audio: np.ndarray, sample_rate: int = 24_000,
                         n_fft: int = 1024, hop: int = 256, bands: int = 80) -> float:
    """Mean absolute difference in dB between two clips' log band energies (power summed over
    ``bands`` mel-spaced bands per frame, the resolution of a mel spectrogram), over the
    frame-bands within 50 dB of the reference's loudest one, so that near-silent bands (where any
    change is large in dB and inaudible) do not dominate. Equal-length clips >= ``n_fft`` samples."""
    if reference.shape != audio.shape or reference.size < n_fft:
        raise ValueError(f"need two clips of the same length >= {n_fft}, got {reference.shape} and {audio.shape}")
    window = np.hanning(n_fft)
    starts = np.arange(0, reference.size - n_fft + 1, hop)
    mel_edges = np.linspace(0.0, 2595 * np.log10(1 + sample_rate / 2 / 700), bands + 1)
    edges = np.round(700 * (10 ** (mel_edges / 2595) - 1) * n_fft / sample_rate).astype(int)
    edges = np.maximum.accumulate(np.maximum(edges, np.arange(bands + 1)))  # >= 1 bin per band

    def log_bands(x: np.ndarray) -> np.ndarray:
        frames = np.stack([x[s:s + n_fft] for s in starts]).astype(np.float64) * window
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        summed = np.add.reduceat(power, edges[:-1], axis=1)
        return 10 * np.log10(summed + 1e-12)

    ref_db, db = log_bands(reference), log_bands(audio)
    loud = ref_db > ref_db.max() - _LOUD_RANGE_DB
    return float(np.mean(np.abs(db - ref_db)[loud]))


def check_close_output(shipped: Path | np.ndarray, derived: Path, voices: Path,
                       tolerance_db: float = SPECTRAL_TOLERANCE_DB) -> float:
    """Like check_same_output, but raise RuntimeError unless the audio has the same length (same
    durations) and a spectral distance within ``tolerance_db``. Returns the distance."""
    reference, name = _reference(shipped, voices)
    return check_close_audio(reference, check_audio(derived, voices), Path(derived).name, name, tolerance_db)


def check_close_audio(reference: np.ndarray, audio: np.ndarray, label: str, reference_label: str,
                      tolerance_db: float = SPECTRAL_TOLERANCE_DB) -> float:
    """check_close_output's test on two clips already computed (``label`` names ``audio``'s source
    in the error); returns the spectral distance."""
    if reference.shape != audio.shape:
        raise RuntimeError(f"{label} changes the audio length on the check input "
                           f"({audio.size} vs {reference.size} samples): the durations moved")
    if not np.all(np.isfinite(audio)):
        raise RuntimeError(f"{label} gives non-finite samples on the check input")
    distance = spectral_distance_db(reference, audio)
    if not distance <= tolerance_db:
        raise RuntimeError(f"{label} is {distance:.2f} dB from {reference_label} on the check "
                           f"input (tolerance {tolerance_db} dB)")
    return distance
