"""Fused steps for the vocoder's other single-threaded onnxruntime ops (issue 2, speed).

``fused_runtime.FusedSession`` runs the runtime graph as onnxruntime segments with fused steps in
between. Besides the conv-input chains (``fused_runtime.Chain``) it takes the patterns found here
out of the segments; each pattern lists its nodes, the tensors it reads and the tensors it hands
on, and has a step that computes those outputs with numpy (multi-threaded BLAS where it matters):

``Spectrum``
    the harmonic source's ``STFT -> Transpose(0, 2, 1, 3) -> Gather(real) / Gather(imaginary)``.
    onnxruntime's STFT runs a Bluestein FFT per frame on one thread (n_fft 20: 64-point FFTs);
    here it is one small GEMM of the frames with a [2 * bins, n_fft] basis. The basis is
    onnxruntime's own STFT of the n_fft unit impulses, measured when the runner loads, not an
    exact DFT: the graph turns the spectrum into a phase with ``atan(imag / real)`` and a
    ``Where`` on the sign of ``imag``, so on the DC and Nyquist bins (exactly 0 imaginary part in
    arithmetic) the phase of a negative bin is +pi or -pi by the sign of onnxruntime's rounding
    error. Its Bluestein tables make that error mostly a fixed linear function of the frame; the
    impulse basis carries it and gives onnxruntime's sign on 99-99.9 % of those frames, where an
    exact DFT basis flips the phase by 2 pi on most of them (an earlier Conv rewrite moved the
    audio 2.5-3.3 dB that way).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

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


def _match_spectrum(g: Any, stft: Any) -> Spectrum:
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
    from cosyedge.engines.kokoro.fused_runtime import _Index

    g = _Index(graph)
    found = []
    for node in graph.node:
        if node.op_type == "STFT" and node.name.startswith(prefix):
            try:
                found.append(_match_spectrum(g, node))
            except (ValueError, StopIteration) as exc:
                logger.debug("%s: not a fusable STFT (%s)", node.name, exc)
    return found


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
    (``kernels.frame_dft`` on the signal's polyphase rows; ~0.5 M multiply-adds per second of
    audio)."""

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


# --- ConvTranspose --------------------------------------------------------------------------------

# Only transposed convs with at least this many input channels are fused: the generator's two
# upsamplers (512 -> 256 and 256 -> 128 channels), not the inverse STFT (22 -> 1, under 1 ms).
MIN_UPSAMPLE_CHANNELS = 64


@dataclass
class Upsample:
    """One 1-D, ungrouped ConvTranspose with constant weight [Cin, Cout, k] and bias [Cout]."""

    x: str
    y: str
    weight: np.ndarray
    bias: np.ndarray
    stride: int
    pad_lo: int
    pad_hi: int
    output_padding: int
    nodes: list = field(repr=False, default_factory=list)

    @property
    def inputs(self) -> list[str]:
        return [self.x]

    @property
    def outputs(self) -> list[str]:
        return [self.y]

    def out_length(self, t_in: int) -> int:
        """ONNX's output length for ``t_in`` input frames (no dilation)."""
        k = self.weight.shape[2]
        return self.stride * (t_in - 1) + self.output_padding + k - self.pad_lo - self.pad_hi


def _match_upsample(g: Any, node: Any) -> Upsample:
    attrs = _attrs(node)
    weight = g.const(node.input[1]).astype(np.float32)
    if weight.ndim != 3 or attrs.get("group", 1) != 1 or list(attrs.get("dilations", [1])) != [1]:
        raise ValueError("not a 1-D ungrouped ConvTranspose")
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or "output_shape" in attrs:
        raise ValueError("auto_pad / output_shape not handled")
    if weight.shape[0] < MIN_UPSAMPLE_CHANNELS:
        raise ValueError("too small to be worth it")
    bias = g.const(node.input[2]).astype(np.float32).reshape(-1) if len(node.input) > 2 and node.input[2] \
        else np.zeros(weight.shape[1], np.float32)
    if bias.size != weight.shape[1]:
        raise ValueError("bias size is not Cout")
    pads = list(attrs.get("pads", [0, 0]))
    stride = list(attrs.get("strides", [1]))
    output_padding = list(attrs.get("output_padding", [0]))
    if len(pads) != 2 or len(stride) != 1 or len(output_padding) != 1 or min(pads) < 0 or stride[0] < 1:
        raise ValueError("unexpected pads/strides")
    return Upsample(x=node.input[0], y=node.output[0], weight=weight, bias=bias, stride=int(stride[0]),
                    pad_lo=int(pads[0]), pad_hi=int(pads[1]), output_padding=int(output_padding[0]), nodes=[node])


def find_upsamples(graph: Any, prefix: str = GENERATOR_PREFIX) -> list[Upsample]:
    """Every fusable ConvTranspose under ``prefix`` (node names), in graph order."""
    from cosyedge.engines.kokoro.fused_runtime import _Index

    g = _Index(graph)
    found = []
    for node in graph.node:
        if node.op_type == "ConvTranspose" and node.name.startswith(prefix):
            try:
                found.append(_match_upsample(g, node))
            except (ValueError, StopIteration) as exc:
                logger.debug("%s: not a fusable ConvTranspose (%s)", node.name, exc)
    return found


class UpsampleStep:
    """An ``Upsample`` as onnxruntime's multi-threaded float MatMul of the transposed weight
    [k * Cout, Cin] with the input (onnxruntime's ConvTranspose kernel runs the same GEMM on one
    thread), written into a reused buffer, then ``kernels.overlap_add`` (the col2im: each output
    sample sums its k / stride taps, plus the bias) on channel ranges over the runner's pool."""

    def __init__(self, up: Upsample, pool: Any, parts: int, threads: int) -> None:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        from cosyedge.engines.kokoro.fused_runtime import _session_options

        self.up, self.pool, self.parts = up, pool, max(1, parts)
        self.inputs = up.inputs
        self.outputs = up.outputs
        cin, cout, k = up.weight.shape
        # row j * Cout + c holds the weights of output channel c at kernel tap j
        w_t = np.ascontiguousarray(up.weight.transpose(2, 1, 0).reshape(k * cout, cin))
        graph = helper.make_graph([helper.make_node("MatMul", ["w_t", "x"], ["col"])], "upsample",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, None])],
                                  [helper.make_tensor_value_info("col", TensorProto.FLOAT, [1, k * cout, None])],
                                  [numpy_helper.from_array(w_t, "w_t")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        self.session = ort.InferenceSession(model.SerializeToString(), _session_options(threads),
                                            providers=["CPUExecutionProvider"])

    def _spread(self, fn, channels: int, *args) -> None:
        bounds = np.linspace(0, channels, self.parts + 1).astype(int)
        ranges = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        futures = [self.pool.submit(fn, *args, a, b) for a, b in ranges[1:]] if self.pool else []
        for a, b in ranges[:1] if self.pool else ranges:
            fn(*args, a, b)
        for future in futures:
            future.result()

    def run(self, tensors: dict[str, np.ndarray], state: Any) -> dict[str, np.ndarray]:
        from cosyedge.engines.kokoro import kernels

        up = self.up
        x = tensors[up.x]
        cin, cout, k = up.weight.shape
        if x.ndim != 3 or x.shape[0] != 1 or x.shape[1] != cin or x.dtype != np.float32:
            raise EngineError(f"ConvTranspose input {up.x!r} has shape {x.shape} {x.dtype}; expected [1, {cin}, T] float32")
        x = np.ascontiguousarray(x)
        t_in = x.shape[2]
        t_out = up.out_length(t_in)
        if t_out < 1:
            raise EngineError(f"ConvTranspose input of {t_in} frames gives no output")
        col, col_raw = state.buffers.take("upsample", (1, k * cout, t_in), np.float32)
        binding = self.session.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("col", "cpu", 0, np.float32, list(col.shape), col.ctypes.data)
        self.session.run_with_iobinding(binding, state.run_options)
        y = np.empty((1, cout, t_out), np.float32)
        self._spread(kernels.overlap_add, cout, col[0], up.bias, up.stride, up.pad_lo, y[0])
        state.largest = max(state.largest, col.nbytes)
        state.buffers.give("upsample", col_raw)
        return {up.y: y}


# --- dispatch -------------------------------------------------------------------------------------


KINDS = ("stft", "upsample")  # every pattern kind of this module, in the order they were added


def find_patterns(graph: Any, kinds: Sequence[str] = KINDS) -> list[Any]:
    """The fusable patterns of these ``kinds`` in ``graph`` (none found: the nodes stay in onnxruntime)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fused op kinds {sorted(unknown)}; choose from {KINDS}")
    found: list[Any] = []
    if "stft" in kinds:
        found += find_spectra(graph)
    if "upsample" in kinds:
        found += find_upsamples(graph)
    return found


def make_step(pattern: Any, pool: Any, threads: int) -> Any:
    """The fused step that runs ``pattern`` (``pool``: the runner's helper threads, or None)."""
    if isinstance(pattern, Spectrum):
        return SpectrumStep(pattern)
    if isinstance(pattern, Upsample):
        return UpsampleStep(pattern, pool, threads, threads)
    raise TypeError(f"no fused step for {type(pattern).__name__}")
