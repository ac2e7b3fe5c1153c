"""Fused steps for the vocoder's other single-threaded onnxruntime ops (for speed).

``fused_runtime.FusedSession`` runs the runtime graph as onnxruntime segments with fused steps in
between. Besides the conv-input chains (``fused_runtime.Chain``) it takes the patterns found here
out of the segments; each pattern lists its nodes, the tensors it reads and the tensors it hands
on, and has a step that computes those outputs with numba kernels (``kernels``; no BLAS threads):

``Spectrum``
    the harmonic source's ``STFT -> Transpose(0, 2, 1, 3) -> Gather(real) / Gather(imaginary)``.
    onnxruntime's STFT runs a Bluestein FFT per frame on one thread (n_fft 20: 64-point FFTs);
    here it is one small dense transform of the frames with a [2 * bins, n_fft] basis. The basis is
    onnxruntime's own STFT of the n_fft unit impulses, measured when the runner loads, not an
    exact DFT: the graph turns the spectrum into a phase with ``atan(imag / real)`` and a
    ``Where`` on the sign of ``imag``, so on the DC and Nyquist bins (exactly 0 imaginary part in
    arithmetic) the phase of a negative bin is +pi or -pi by the sign of onnxruntime's rounding
    error. Its Bluestein tables make that error mostly a fixed linear function of the frame; the
    impulse basis carries it and gives onnxruntime's sign on 99-99.9 % of those frames, where an
    exact DFT basis flips the phase by 2 pi on most of them (an earlier Conv rewrite moved the
    audio 2.5-3.3 dB that way).
``BiasResidual``
    a conv's per-channel bias Add read only by a residual Add, in the generator: one pass
    ``(x + b) + r`` on channel ranges instead of two single-threaded onnxruntime passes; the same
    additions in the same order (bit-identical).

``Upsampler``
    the generator's two ``ConvTranspose`` upsamplers (kernel 2 x stride, padding stride / 2) as an
    int8 GEMM: the input quantized per tensor, the taps per tensor and symmetrically, onnxruntime's
    uint8 x int8 ``MatMulIntegerToFloat``, then a numba overlap-add of each step's two taps + bias.
    Not exact: the 8-bit rounding moves the check audio ~0.2 dB (1.06 -> 1.27 dB from the shipped
    graph), about what a 1e-6 change of the style vector does; 40 -> 16 ms (~3 %) on a 5 s call. (The
    float GEMM + a numba col2im was bit-identical but no faster, docs/bench-log/kokoro.md round 4.)

Each pattern is optional: one not found at load leaves its nodes in the onnxruntime segments.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from cosyedge.engines.kokoro.graph_index import GraphIndex, find_matches
from cosyedge.engines.kokoro.sessions import segment_session_options
from cosyedge.errors import EngineError

logger = logging.getLogger(__name__)

GENERATOR_PREFIX = "/decoder/"


# --- STFT -----------------------------------------------------------------------------------------


@dataclass
class Spectrum:
    """One onesided STFT of a real signal whose consumers take its real and imaginary parts as
    [N, bins, frames] tensors (``real`` / ``imag``; either may be absent)."""

    signal: str
    hop: int
    n_fft: int
    window: np.ndarray
    real: str | None
    imag: str | None
    nodes: list = field(repr=False, default_factory=list)

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def inputs(self) -> list[str]:
        return [self.signal]

    @property
    def outputs(self) -> list[str]:
        return [name for name in (self.real, self.imag) if name]


def _attrs(node: Any) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _match_spectrum(g: GraphIndex, stft: Any) -> Spectrum:
    """The spectrum pattern starting at ``stft``, or ValueError saying why it is not one."""
    if len(stft.input) < 3 or not stft.input[2] or _attrs(stft).get("onesided", 1) != 1:
        raise ValueError("not a windowed onesided STFT")
    hop = g.const(stft.input[1]).reshape(-1)
    window = g.const(stft.input[2]).astype(np.float32)
    if hop.size != 1 or int(hop[0]) < 1 or window.ndim != 1 or window.size < 2:
        raise ValueError("hop or window not constant")
    if len(stft.input) > 3 and stft.input[3]:
        length = g.const(stft.input[3]).reshape(-1)
        if length.size != 1 or int(length[0]) != window.size:
            raise ValueError("frame length differs from the window")
    transpose = g.only_user(stft.output[0], "Transpose")
    if list(_attrs(transpose).get("perm", [])) != [0, 2, 1, 3]:
        raise ValueError("not the [N, bins, frames, 2] transpose")
    parts: dict[int, str] = {}
    gathers = g.users(transpose.output[0])
    for gather in gathers:
        if gather.op_type != "Gather" or _attrs(gather).get("axis", 0) not in (3, -1):
            raise ValueError("the transpose feeds something else than Gathers on its last axis")
        index = g.const(gather.input[1])
        if index.ndim != 0 or int(index) not in (0, 1, -1, -2) or int(index) % 2 in parts:
            raise ValueError("not one scalar Gather per part")
        parts[int(index) % 2] = gather.output[0]
    if not parts:
        raise ValueError("no Gathers")
    graph_outputs = {o.name for o in g.graph.output}
    if {stft.output[0], transpose.output[0]} & graph_outputs:
        raise ValueError("inner tensors are graph outputs")
    return Spectrum(signal=stft.input[0], hop=int(hop[0]), n_fft=int(window.size), window=window,
                    real=parts.get(0), imag=parts.get(1), nodes=[stft, transpose, *gathers])


def find_spectra(graph: Any, prefix: str = GENERATOR_PREFIX) -> list[Spectrum]:
    """Every fusable STFT under ``prefix`` (node names), in graph order."""
    return find_matches(graph, "STFT", prefix, _match_spectrum, "a fusable STFT")


def onnxruntime_stft_basis(hop: int, window: np.ndarray) -> np.ndarray:
    """onnxruntime's STFT (this installed version) of the ``n_fft`` unit impulses, as a
    [2 * bins, n_fft] float32 matrix (real rows, then imaginary rows): ``basis @ frame`` is what
    its kernel computes for one frame, up to its per-frame rounding."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n_fft = window.size
    inits = [numpy_helper.from_array(np.array(hop, np.int64), "hop"),
             numpy_helper.from_array(window.astype(np.float32), "window"),
             numpy_helper.from_array(np.array(n_fft, np.int64), "length")]
    graph = helper.make_graph([helper.make_node("STFT", ["signal", "hop", "window", "length"], ["spectrum"],
                                                onesided=1)], "stft",
                              [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [n_fft, n_fft])],
                              [helper.make_tensor_value_info("spectrum", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    spectrum = session.run(None, {"signal": np.eye(n_fft, dtype=np.float32)})[0][:, 0]  # [impulse, bin, 2]
    return np.ascontiguousarray(np.concatenate([spectrum[:, :, 0].T, spectrum[:, :, 1].T]), np.float32)


class SpectrumStep:
    """A ``Spectrum`` as a small dense transform: every frame times the impulse basis
    (``kernels.frame_dft`` on the signal's polyphase rows; ~2 M multiply-adds per second of
    audio, against onnxruntime's two 64-point FFTs per frame)."""

    def __init__(self, spectrum: Spectrum) -> None:
        self.spectrum = spectrum
        self.inputs = spectrum.inputs
        self.outputs = spectrum.outputs
        basis = onnxruntime_stft_basis(spectrum.hop, spectrum.window)
        self.taps = -(-spectrum.n_fft // spectrum.hop)  # whole hops per window
        self.basis = np.zeros((basis.shape[0], self.taps * spectrum.hop), np.float32)
        self.basis[:, :spectrum.n_fft] = basis

    def run(self, tensors: dict[str, np.ndarray], state: Any) -> dict[str, np.ndarray]:
        from cosyedge.engines.kokoro import kernels

        spec = self.spectrum
        x = tensors[spec.signal]
        if x.dtype != np.float32 or x.ndim not in (2, 3) or (x.ndim == 3 and x.shape[2] != 1):
            raise EngineError(f"STFT input {spec.signal!r} has shape {x.shape} {x.dtype}; expected [N, L] float32")
        batch, length = x.shape[:2]
        if length < spec.n_fft:
            raise EngineError(f"STFT input of {length} samples is shorter than its window ({spec.n_fft})")
        frames = (length - spec.n_fft) // spec.hop + 1
        blocks = frames + self.taps - 1
        out = np.empty((batch, self.basis.shape[0], frames), np.float32)
        for b in range(batch):
            signal = np.zeros(blocks * spec.hop, np.float32)
            used = min(length, signal.size)
            signal[:used] = x[b, :used].reshape(-1)
            phases = np.ascontiguousarray(signal.reshape(blocks, spec.hop).T)
            kernels.frame_dft(phases, self.basis, out[b], 0, out.shape[1])
        bins = spec.bins
        result = {}
        if spec.real:
            result[spec.real] = np.ascontiguousarray(out[:, :bins])
        if spec.imag:
            result[spec.imag] = np.ascontiguousarray(out[:, bins:])
        return result


# --- conv bias + residual Add --------------------------------------------------------------------

RESIDUAL_PREFIX = "/decoder/decoder/generator/"  # the vocoder's full-rate tensors; the decoder's are small


@dataclass
class BiasResidual:
    """``(x + bias) + residual``: a conv's per-channel bias Add read only by a residual Add."""

    x: str
    residual: str
    y: str
    bias: np.ndarray  # [C] float32
    nodes: list = field(repr=False, default_factory=list)

    @property
    def inputs(self) -> list[str]:
        return [self.x, self.residual]

    @property
    def outputs(self) -> list[str]:
        return [self.y]


def _match_bias_residual(g: GraphIndex, add: Any) -> BiasResidual:
    graph_outputs = {o.name for o in g.graph.output}
    if add.output[0] in graph_outputs:  # the step writes into a buffer the runner reuses
        raise ValueError("the sum is a graph output")
    for k, name in enumerate(add.input):
        bias_add = g.producer.get(name)
        if bias_add is None or bias_add.op_type != "Add" or len(g.users(name)) != 1 or name in graph_outputs:
            continue
        consts = [i for i in bias_add.input if i in g.inits]
        if len(consts) != 1 or add.input[1 - k] in g.inits:
            continue
        bias = g.const(consts[0])
        if bias.ndim < 2 or bias.shape[-1] != 1 or bias.size != bias.shape[-2]:  # [C, 1] or [1, C, 1]
            continue
        x = next(i for i in bias_add.input if i != consts[0])
        return BiasResidual(x=x, residual=add.input[1 - k], y=add.output[0],
                            bias=bias.astype(np.float32).reshape(-1), nodes=[bias_add, add])
    raise ValueError("not a bias Add followed by a residual Add")


def find_bias_residuals(graph: Any, prefix: str = RESIDUAL_PREFIX) -> list[BiasResidual]:
    """Every bias + residual Add pair under ``prefix`` (node names), in graph order."""
    return find_matches(graph, "Add", prefix, _match_bias_residual, "a bias + residual pair")


class BiasResidualStep:
    """``(x + bias) + residual`` in one pass (``kernels.bias_residual``, the same additions in the
    same order: bit-identical) on channel ranges over the runner's pool, instead of two
    onnxruntime passes."""

    def __init__(self, pattern: BiasResidual, pool: Any, parts: int) -> None:
        self.pattern, self.pool, self.parts = pattern, pool, max(1, parts)
        self.inputs = pattern.inputs
        self.outputs = pattern.outputs

    def run(self, tensors: dict[str, np.ndarray], state: Any) -> dict[str, np.ndarray]:
        from cosyedge.engines.kokoro import kernels

        pat = self.pattern
        x, residual = tensors[pat.x], tensors[pat.residual]
        if x.shape != residual.shape or x.ndim != 3 or x.shape[0] != 1 or x.shape[1] != pat.bias.size \
                or x.dtype != np.float32 or residual.dtype != np.float32:
            # anything but the plain case: numpy's broadcasting, same arithmetic
            return {pat.y: (x + pat.bias.reshape(-1, 1)) + residual}
        x, residual = np.ascontiguousarray(x[0]), np.ascontiguousarray(residual[0])
        if state is not None:  # a kept buffer: a fresh 16 MB array costs as much in page faults as the pass
            y, raw = state.buffers.take("residual", (1, *x.shape), np.float32)
            state.owned[pat.y] = ("residual", raw)  # given back when the runner drops the tensor
            state.largest = max(state.largest, y.nbytes)
        else:
            y = np.empty((1, *x.shape), np.float32)
        kernels.spread_channels(self.pool, self.parts, kernels.bias_residual, x.shape[0], x, pat.bias, residual, y[0])
        return {pat.y: y}


# --- int8 upsamplers ------------------------------------------------------------------------------

UPSAMPLER_PREFIX = "/decoder/decoder/generator/ups."
#: Input steps per GEMM: the taps of a whole 510-phoneme call would be a [1536, ~24000] float
#: tensor (150 MB); tiles of 2048 steps keep them under 13 MB at the same GEMM speed.
TILE_STEPS = 2048


@dataclass
class Upsampler:
    """A generator upsampler ``ConvTranspose(x, weight, bias)`` whose kernel is twice its stride and
    whose padding is half the stride, so every output step is the sum of exactly two taps and the
    output is ``stride`` times as long as the input."""

    x: str
    y: str
    weight: np.ndarray  # [C_in, C_out, 2 * stride] float32
    bias: np.ndarray  # [C_out] float32
    stride: int
    nodes: list = field(repr=False, default_factory=list)

    @property
    def inputs(self) -> list[str]:
        return [self.x]

    @property
    def outputs(self) -> list[str]:
        return [self.y]


def _match_upsampler(g: GraphIndex, node: Any) -> Upsampler:
    attrs = _attrs(node)
    if len(node.input) != 3 or node.input[1] not in g.inits or node.input[2] not in g.inits:
        raise ValueError("weight and bias must be constants")
    weight = g.const(node.input[1]).astype(np.float32)
    bias = g.const(node.input[2]).astype(np.float32).reshape(-1)
    stride = int(attrs.get("strides", [0])[0])
    if (weight.ndim != 3 or attrs.get("group", 1) != 1 or list(attrs.get("dilations", [1])) != [1]
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or any(attrs.get("output_padding", []))
            or stride < 2 or stride % 2 or weight.shape[2] != 2 * stride
            or list(attrs.get("pads", [])) != [stride // 2, stride // 2] or bias.size != weight.shape[1]):
        raise ValueError(f"not a kernel = 2 x stride, padding = stride / 2 upsampler: {attrs}")
    return Upsampler(x=node.input[0], y=node.output[0], weight=weight, bias=bias, stride=stride, nodes=[node])


def find_upsamplers(graph: Any, prefix: str = UPSAMPLER_PREFIX) -> list[Upsampler]:
    """Every two-tap upsampler ConvTranspose under ``prefix`` (node names), in graph order."""
    return find_matches(graph, "ConvTranspose", prefix, _match_upsampler, "a two-tap upsampler")


def quantize_weight(weight: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """The upsampler's taps as the left operand of a uint8 x int8 GEMM: row ``j * C_out + o``,
    column ``i`` holds ``weight[i, o, j]``, quantized per tensor and symmetrically (zero point
    128, scale ``max |w| / 127``). Returns (uint8 [2 * stride * C_out, C_in], scale)."""
    c_in, c_out, taps = weight.shape
    rows = weight.transpose(2, 1, 0).reshape(taps * c_out, c_in)
    scale = np.float32(max(float(np.abs(rows).max()), 1e-30) / 127.0)
    q = np.clip(np.rint(rows / scale), -127, 127).astype(np.int16) + 128
    return q.astype(np.uint8), scale


def _gemm_model(weight_u8: np.ndarray, weight_scale: np.float32) -> bytes:
    """One ``MatMulIntegerToFloat``: the constant uint8 taps [M, C_in] times the int8 input
    [C_in, T] (VNNI's u8 x s8 path) -> float [M, T]."""
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("MatMulIntegerToFloat", ["w", "x", "w_scale", "x_scale", "w_zero", "x_zero"], ["z"],
                            domain="com.microsoft")
    graph = helper.make_graph(
        [node], "upsampler_gemm",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [weight_u8.shape[1], None]),
         helper.make_tensor_value_info("x_scale", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("x_zero", TensorProto.INT8, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight_u8, "w"),
         numpy_helper.from_array(np.array(weight_scale, np.float32), "w_scale"),
         numpy_helper.from_array(np.array(128, np.uint8), "w_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


class UpsamplerStep:
    """The upsampler as an int8 GEMM: the input quantized per tensor as DynamicQuantizeLinear does
    (``kernels.row_extremes``, ``kernels.quantize_rows`` on channel ranges), the taps applied by
    onnxruntime's uint8 x int8 ``MatMulIntegerToFloat`` on the runner's threads (``tile`` input
    steps at a time), and the two taps of every output step added with the bias
    (``kernels.overlap_add``). onnxruntime runs the float ConvTranspose as a float GEMM + col2im;
    the price here is the rounding of the input and the taps to 8 bits (docs/bench-log/kokoro.md, round 6).
    Keeps only the quantized taps (in its session), not the pattern's float weight."""

    def __init__(self, pattern: Upsampler, pool: Any, parts: int, threads: int, tile: int = TILE_STEPS) -> None:
        import onnxruntime as ort

        self.pool, self.parts, self.tile = pool, max(1, parts), max(1, int(tile))
        self.inputs = pattern.inputs
        self.outputs = pattern.outputs
        self.x, self.y, self.bias, self.stride = pattern.x, pattern.y, pattern.bias, pattern.stride
        self.c_in, self.c_out = pattern.weight.shape[:2]
        weight_u8, weight_scale = quantize_weight(pattern.weight)
        self.session = ort.InferenceSession(_gemm_model(weight_u8, weight_scale), segment_session_options(threads),
                                            providers=["CPUExecutionProvider"])

    def run(self, tensors: dict[str, np.ndarray], state: Any) -> dict[str, np.ndarray]:
        from cosyedge.engines.kokoro import kernels

        x = tensors[self.x]
        c_in, c_out = self.c_in, self.c_out
        if x.ndim != 3 or x.shape[0] != 1 or x.shape[1] != c_in or x.dtype != np.float32:
            raise EngineError(f"upsampler input {self.x!r} has shape {x.shape} {x.dtype}; "
                              f"expected [1, {c_in}, T] float32")
        x = np.ascontiguousarray(x[0])
        frames = x.shape[1]

        def spread(kernel, channels, *args) -> None:
            kernels.spread_channels(self.pool, self.parts, kernel, channels, *args)

        mins, maxs = np.empty((2, c_in), np.float32)
        spread(kernels.row_extremes, c_in, x, mins, maxs)
        scale, zero_point = kernels.quant_params(mins, maxs)
        quantized = np.empty((c_in, frames), np.int8)
        spread(kernels.quantize_rows, c_in, x, scale, zero_point, quantized)
        shape = (1, c_out, frames * self.stride)
        if state is not None:  # a kept buffer: fresh pages cost page faults on every call
            y, raw = state.buffers.take("upsampled", shape, np.float32)
            state.owned[self.y] = ("upsampled", raw)  # given back when the runner drops the tensor
            state.largest = max(state.largest, y.nbytes)
        else:
            y = np.empty(shape, np.float32)
        feeds = {"x_scale": np.array(scale, np.float32), "x_zero": np.array(zero_point - 128, np.int8)}
        for m_start in range(0, frames, self.tile):  # the taps of ``tile`` steps at a time (+1 to the left)
            m_stop = min(frames, m_start + self.tile)
            first = max(0, m_start - 1)
            feeds["x"] = np.ascontiguousarray(quantized[:, first:m_stop])
            taps = self.session.run(None, feeds)[0]
            last = frames + 1 if m_stop == frames else m_stop  # the last step's second tap ends the signal
            spread(kernels.overlap_add, c_out, taps, first, m_start, last, frames, self.bias, self.stride, y[0])
        return {self.y: y}


# --- dispatch -------------------------------------------------------------------------------------


KINDS = ("stft", "bias_residual", "upsampler")  # every pattern kind of this module, in the order they were added


def find_patterns(graph: Any, kinds: Sequence[str] = KINDS) -> list[Any]:
    """The fusable patterns of these ``kinds`` in ``graph`` (none found: the nodes stay in onnxruntime)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fused op kinds {sorted(unknown)}; choose from {KINDS}")
    found: list[Any] = []
    if "stft" in kinds:
        found += find_spectra(graph)
    if "bias_residual" in kinds:
        found += find_bias_residuals(graph)
    if "upsampler" in kinds:
        found += find_upsamplers(graph)
    return found


def make_step(pattern: Any, pool: Any, threads: int) -> Any:
    """The fused step that runs ``pattern`` (``pool``: the runner's helper threads, or None)."""
    if isinstance(pattern, Spectrum):
        return SpectrumStep(pattern)
    if isinstance(pattern, BiasResidual):
        return BiasResidualStep(pattern, pool, threads)
    if isinstance(pattern, Upsampler):
        return UpsamplerStep(pattern, pool, threads, threads)
    raise TypeError(f"no fused step for {type(pattern).__name__}")
