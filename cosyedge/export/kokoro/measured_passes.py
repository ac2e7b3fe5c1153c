"""Graph passes on the shipped Kokoro int8 ONNX that were measured and not kept (docs/bench-log/kokoro.md):
the benchmarks derive graphs with them (``derive``), setup never does.

``stft_as_conv``
    the vocoder source's STFT as one strided Conv with a DFT basis: correct to float rounding, but
    the phase that follows (atan of im/re) amplifies that rounding to a 2.5-3.3 dB change.
``conv`` / ``matmul`` / ``lstm``
    fold the int8 weights back into float32 ``Conv`` / ``MatMul`` / ``LSTM`` (weight =
    ``(q - zero_point) * scale``, float bias) and drop the activation quantization: slower on the
    VNNI machine we tried, 2.8-3.5x larger.

They run after the product's passes (``optimize.PASSES``) when combined with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from cosyedge.export.kokoro import optimize
from cosyedge.export.kokoro.optimize import GraphEdit, Pass, float_bias

if TYPE_CHECKING:  # onnx is imported where a graph is read or written
    import onnx


def _dequantize(q: np.ndarray, zero_point: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(q - zp) * scale`` in float32; the integers are exact in float32, only the product rounds."""
    return (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)


def _stft_as_conv(g: GraphEdit) -> int:
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
        hop = g.value(node.input[1])
        window = g.value(node.input[2])
        length = g.value(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if attrs.get("onesided", 1) != 1 or hop is None or window is None or window.ndim != 1:
            continue
        n_fft = window.size
        if length is not None and int(length) != n_fft:
            continue
        users = g.users(node.output[0])
        if len(users) != 1 or users[0].op_type != "Transpose" or \
                list(helper.get_attribute_value(users[0].attribute[0])) != [0, 2, 1, 3]:
            continue
        transpose = users[0]
        parts: dict[int, "onnx.NodeProto"] = {}
        for gather in g.users(transpose.output[0]):
            index = g.value(gather.input[1]) if gather.op_type == "Gather" else None
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


def _conv_to_float(g: GraphEdit) -> int:
    """ConvInteger [+ int32 bias Add] -> Cast -> Mul(scale)  ==>  float Conv(x, W, b)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "ConvInteger":
            continue
        w_q = g.const(node.input[1])
        zero = g.const(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), np.float32)
        add, cast, mul = g.quantized_tail(node)
        scale = g.weight_scale(g.other_input(mul, cast.output[0]))
        if scale.size > 1:  # per output channel
            scale = scale.reshape(-1, *([1] * (w_q.ndim - 1)))
        inputs = [g.float_source(node.input[0]),
                  g.add_init(f"{node.input[1]}_dequantized", _dequantize(w_q, zero, scale))]
        if add is not None:
            inputs.append(float_bias(g, g.other_input(add, node.output[0])))
        conv = helper.make_node("Conv", inputs, [mul.output[0]], name=node.name.removesuffix("_quant"))
        conv.attribute.extend(node.attribute)
        g.replace.update({id(node): [conv], id(cast): [], id(mul): []} | ({id(add): []} if add else {}))
        count += 1
    return count


def _matmul_to_float(g: GraphEdit) -> int:
    """MatMulInteger(a_q, B_q) -> Cast -> Mul(scale)  ==>  float MatMul(a, B)."""
    from onnx import helper

    count = 0
    for node in list(g.graph.node):
        if node.op_type != "MatMulInteger":
            continue
        b_q = node.input[1]
        zero = g.const(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), np.float32)
        add, cast, mul = g.quantized_tail(node)
        if add is not None:
            raise ValueError(f"{node.name}: an integer bias after MatMulInteger is not expected")
        scale = g.weight_scale(g.other_input(mul, cast.output[0]))  # [N] per column, or scalar
        weight = g.add_init(f"{b_q}_dequantized", _dequantize(g.const(b_q), zero, scale))
        matmul = helper.make_node("MatMul", [g.float_source(node.input[0]), weight], [mul.output[0]],
                                  name=node.name.removesuffix("_quant"))
        g.replace.update({id(node): [matmul], id(cast): [], id(mul): []})
        count += 1
    return count


def _lstm_to_float(g: GraphEdit) -> int:
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
            q = g.const(q_name)  # [D, in, 4H]
            directions = q.shape[0]
            scale = g.const(s_name).reshape(directions, 1, -1)  # [D] or [D, 4H]
            zero = g.const(zp_name).reshape(directions, 1, -1)
            mats.append(g.add_init(f"{q_name}_dequantized", _dequantize(q, zero, scale).transpose(0, 2, 1)))
        inputs = [x, mats[0], mats[1], b, seq, h0, c0, p]
        while inputs and not inputs[-1]:
            inputs.pop()
        lstm = helper.make_node("LSTM", inputs, list(node.output), name=node.name.removesuffix("_quant"))
        lstm.attribute.extend(node.attribute)
        g.replace[id(node)] = [lstm]
        count += 1
    return count


#: Every pass by name, the product's first, in the order they are applied.
PASS_FUNCS: dict[str, Pass] = {**optimize.PASS_FUNCS, "stft_as_conv": _stft_as_conv, "conv": _conv_to_float,
                               "matmul": _matmul_to_float, "lstm": _lstm_to_float}
PASSES = tuple(PASS_FUNCS)


def _refuse_conflicts(passes: tuple[str, ...]) -> None:
    if "conv_as_matmul" in passes and "conv" in passes:
        raise ValueError("'conv_as_matmul' and 'conv' both rewrite ConvInteger; pick one")


def rewrite(model: "onnx.ModelProto", passes: Iterable[str]) -> dict[str, int]:
    """``optimize.rewrite`` with these passes too."""
    passes = tuple(passes)
    _refuse_conflicts(passes)
    return optimize.rewrite(model, passes, PASS_FUNCS)


def derive(source: Path, target: Path, passes: Iterable[str]) -> dict[str, int]:
    """``optimize.derive`` with these passes too."""
    passes = tuple(passes)
    _refuse_conflicts(passes)
    return optimize.derive(source, target, passes, PASS_FUNCS)
