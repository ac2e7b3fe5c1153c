"""Fused numba kernel for the Kokoro vocoder's conv-input chain (for speed).

In the runtime graph every vocoder conv reads its input through the same chain of onnxruntime ops::

    [InstanceNormalization(x, gamma, beta)] -> Snake: n + sin(alpha * n)^2 / alpha
      -> DynamicQuantizeLinear -> (q - 128) as int8 -> Pad(zero point) -> k Slices -> Concat

about ten full passes over a tensor of up to 4 M floats, all memory-bound and (except the Concat)
single-threaded in onnxruntime. Here the chain is two passes over channel ranges that callers run
on their own threads (``nogil``; no numba ``parallel=True``: its work-queue layer is not
thread-safe and two jobs may run at once), each working one channel row at a time:

``snake_stats``
    instance-norm statistics (optional; with per-step weights for the generator input crop),
    then the Snake of the row and its min/max; the Snake output is not kept. Each channel's
    norm scale and shift go to ``scales``/``shifts``.
``snake_quantize_im2col``
    the Snake of the row again (the same arithmetic, so the same values), onnxruntime's
    DynamicQuantizeLinear arithmetic (``quantize_row``: divide by the scale, clamp, round half to
    even, add the zero point), the shift to int8 and the zero-point padding into a row-sized
    scratch buffer, then that row's ``taps`` windows into the channel-first im2col.

Between them ``quant_params`` turns the channel extremes into the scale and zero point with
onnxruntime's formula (the quantization is per tensor, so pass 2 needs every channel's pass 1).
Computing the Snake twice costs less than writing it out and reading it back: no [C, T] float
buffer (up to 77 MB per chain on a 510-phoneme sentence) and one full memory pass fewer; 7 % less
CPU on a 5 s call, and the same audio bit for bit (docs/bench-log/kokoro.md, round 6). The result is not
bit-identical to onnxruntime's chain: the instance-norm sums and the sine (a range-reduced odd
polynomial, float32 rounding) round differently, so an element whose value sits on a rounding
boundary can land one quantization step away.

Compiled on first use and cached on disk (``cache=True``: next to this file, or in the model
directory when this one is read-only, see ``fused_runtime.keep_kernel_cache_local``; with no
writable place at all, importing this module raises and the engine runs the plain graph);
``compile_kernels`` does it at engine load, ahead of the first request.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numba
import numpy as np

logger = logging.getLogger(__name__)

_INV_PI = np.float32(1.0 / np.pi)
# Odd polynomial for sin(pi * r) on |r| <= 0.5, least-squares fit on Chebyshev nodes (float64),
# coefficients of r, r^3, ..., r^9; max abs error 3.4e-9, far below float32 rounding.
_S1, _S3, _S5, _S7, _S9 = (np.float32(c) for c in (
    3.14159258, -5.16770687, 2.55003119, -0.59804419, 0.07721839))
_LANES = 16
_ROUND = np.float32(1.5 * 2 ** 23)  # adding and removing it rounds to an integer
_FLAGS = {"nnan", "ninf", "nsz", "contract", "reassoc"}  # the Snake; quantize_row has its own


@numba.njit(nogil=True, cache=True, fastmath=_FLAGS, inline="always")
def _sin_squared(z: float) -> float:
    u = z * _INV_PI
    r = u - np.float32(np.rint(u))
    r2 = r * r
    s = r * (_S1 + r2 * (_S3 + r2 * (_S5 + r2 * (_S7 + r2 * _S9))))
    return s * s


@numba.njit(nogil=True, cache=True, fastmath=_FLAGS, inline="always")
def _snake(n: float, a: float, ra: float) -> float:
    """Snake of the normalized value ``n``: ``n + ra * sin(a * n)^2`` (``ra = 1 / a``). Both passes
    call this one function, so they compute the same float32 value."""
    return n + ra * _sin_squared(a * n)


@numba.njit(nogil=True, cache=True, fastmath=_FLAGS)
def snake_stats(x: np.ndarray, weights: np.ndarray, weighted: bool, gamma: np.ndarray, beta: np.ndarray,
                eps: float, normalize: bool, alpha: np.ndarray, inv_alpha: np.ndarray, scales: np.ndarray,
                shifts: np.ndarray, mins: np.ndarray, maxs: np.ndarray, c0: int, c1: int) -> None:
    """Pass 1, channels ``c0:c1`` of ``x`` [C, T] float32: the instance norm as a per-channel
    ``scale``/``shift`` (``gamma * (x - mean) / sqrt(var + eps) + beta``; 1 and 0 unless
    ``normalize``), and the min and max of ``Snake(x * scale + shift)``. With ``weighted`` the mean
    and variance weigh time step ``t`` by ``weights[t]`` (the generator input crop,
    engines/kokoro/crop.py: kept frames 1, frames that stand for removed silence more); with all
    weights 1 the sums are the plain norm's, bit for bit."""
    t_len = x.shape[1]
    lo = np.empty(_LANES, np.float32)
    hi = np.empty(_LANES, np.float32)
    total = np.float64(t_len)
    if weighted:
        total = 0.0
        for t in range(t_len):
            total += np.float64(weights[t])
    for c in range(c0, c1):
        row = x[c]
        scale = np.float32(1.0)
        shift = np.float32(0.0)
        if normalize:
            # Sums of x - x[0] in float64: no cancellation when the mean is large against the spread.
            ref = row[0]
            s = 0.0
            ss = 0.0
            if weighted:
                for t in range(t_len):
                    w = np.float64(weights[t])
                    d = np.float64(row[t] - ref)
                    s += w * d
                    ss += w * d * d
            else:
                for t in range(t_len):
                    d = np.float64(row[t] - ref)
                    s += d
                    ss += d * d
            mean_d = s / total
            var = max(ss / total - mean_d * mean_d, 0.0)
            inv_std = 1.0 / np.sqrt(var + eps)
            scale = np.float32(gamma[c] * inv_std)
            shift = np.float32(beta[c] - (ref + mean_d) * gamma[c] * inv_std)
        scales[c] = scale
        shifts[c] = shift
        a = alpha[c]
        ra = inv_alpha[c]
        # min/max in _LANES independent lanes: a loop LLVM vectorizes (one running min does not)
        lo[:] = np.inf
        hi[:] = -np.inf
        body = t_len - t_len % _LANES
        for t0 in range(0, body, _LANES):
            for lane in range(_LANES):
                v = _snake(row[t0 + lane] * scale + shift, a, ra)
                lo[lane] = min(lo[lane], v)
                hi[lane] = max(hi[lane], v)
        low = lo.min()
        high = hi.max()
        for t in range(body, t_len):
            v = _snake(row[t] * scale + shift, a, ra)
            low = min(low, v)
            high = max(high, v)
        mins[c] = low
        maxs[c] = high


def quant_params(mins: np.ndarray, maxs: np.ndarray) -> tuple[np.float32, int]:
    """onnxruntime's DynamicQuantizeLinear parameters for data with these channel extremes: the
    range widened to hold 0, ``scale = (max - min) / 255``, zero point ``round(-min / scale)``
    clamped to 0..255 (half to even)."""
    lo = np.float32(min(np.float32(0.0), mins.min()))
    hi = np.float32(max(np.float32(0.0), maxs.max()))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
    zero = np.float32(np.float32(0.0) - lo / scale)
    return scale, int(np.rint(min(np.float32(255.0), max(np.float32(0.0), zero))))


@numba.njit(nogil=True, cache=True, fastmath={"nnan", "ninf", "nsz"})
def quantize_row(v: np.ndarray, scale: float, zero_point: int, out: np.ndarray) -> None:
    """``out`` (int8) = ``v`` quantized to uint8 as DynamicQuantizeLinear does (divide by the
    scale, clamp, round half to even, add the zero point), shifted to int8 (``q - 128``).

    Written so LLVM vectorizes the loop (7x faster than with ``min``/``max`` and an integer add
    before the int8 store, measured): comparisons for the clamp, and the shift added while the
    value is still a float (both operands are whole numbers below 2^8, so the sum is exact)."""
    sc = np.float32(scale)
    lo_clip = np.float32(-zero_point)
    hi_clip = np.float32(255 - zero_point)
    shift = np.float32(zero_point - 128)
    for t in range(v.shape[0]):
        q = v[t] / sc
        q = q if q > lo_clip else lo_clip
        q = q if q < hi_clip else hi_clip
        q = (q + _ROUND) - _ROUND  # round half to even (the default mode): exact for |q| < 2^22
        out[t] = np.int8(np.int32(q + shift))


@numba.njit(nogil=True, cache=True, fastmath=_FLAGS)
def _snake_row(row: np.ndarray, scale: float, shift: float, a: float, ra: float, out: np.ndarray) -> None:
    for t in range(row.shape[0]):
        out[t] = _snake(row[t] * scale + shift, a, ra)


@numba.njit(nogil=True, cache=True)
def _copy(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst[:] = src`` for two contiguous 1-D views: a loop LLVM vectorizes (a 2-D slice
    assignment in numba does not: 21 vs 3.7 ms for a last-stage im2col, measured)."""
    for t in range(dst.shape[0]):
        dst[t] = src[t]


@numba.njit(nogil=True, cache=True)
def snake_quantize_im2col(x: np.ndarray, scales: np.ndarray, shifts: np.ndarray, alpha: np.ndarray,
                          inv_alpha: np.ndarray, scale: float, zero_point: int, pad_lo: int, pad_hi: int,
                          taps: int, dilation: int, col: np.ndarray, c0: int, c1: int) -> None:
    """Pass 2, channels ``c0:c1``: each row's Snake (with pass 1's ``scales``/``shifts``),
    quantized with the tensor's ``scale``/``zero_point``, padded with the shifted zero point, into
    rows ``j * C + c`` of ``col`` [taps * C, T_out] from step ``j * dilation`` of the padded row.
    One row's float and padded int8 scratch (~130 KB for a last-stage row) stay in cache."""
    channels, t_len = x.shape
    t_out = col.shape[1]
    snake = np.empty(t_len, np.float32)
    padded = np.empty(pad_lo + t_len + pad_hi, np.int8)
    fill = np.int8(zero_point - 128)
    padded[:pad_lo] = fill
    padded[pad_lo + t_len:] = fill
    inner = padded[pad_lo:pad_lo + t_len]
    for c in range(c0, c1):
        _snake_row(x[c], scales[c], shifts[c], alpha[c], inv_alpha[c], snake)
        quantize_row(snake, scale, zero_point, inner)
        for j in range(taps):
            _copy(padded[j * dilation:j * dilation + t_out], col[j * channels + c])


@numba.njit(nogil=True, cache=True, fastmath=_FLAGS)
def row_extremes(x: np.ndarray, mins: np.ndarray, maxs: np.ndarray, c0: int, c1: int) -> None:
    """Rows ``c0:c1`` of ``x`` [C, T] float32: each row's min and max (the upsamplers' quantization range)."""
    t_len = x.shape[1]
    lo = np.empty(_LANES, np.float32)
    hi = np.empty(_LANES, np.float32)
    body = t_len - t_len % _LANES
    for c in range(c0, c1):
        row = x[c]
        lo[:] = np.inf
        hi[:] = -np.inf
        for t0 in range(0, body, _LANES):
            for lane in range(_LANES):
                v = row[t0 + lane]
                lo[lane] = min(lo[lane], v)
                hi[lane] = max(hi[lane], v)
        low = lo.min()
        high = hi.max()
        for t in range(body, t_len):
            low = min(low, row[t])
            high = max(high, row[t])
        mins[c] = low
        maxs[c] = high


@numba.njit(nogil=True, cache=True)
def quantize_rows(x: np.ndarray, scale: float, zero_point: int, out: np.ndarray, c0: int, c1: int) -> None:
    """Rows ``c0:c1``: ``out`` (int8) = ``x`` quantized as DynamicQuantizeLinear does, shifted to int8."""
    for c in range(c0, c1):
        quantize_row(x[c], scale, zero_point, out[c])


@numba.njit(nogil=True, cache=True)
def overlap_add(taps: np.ndarray, first: int, m_start: int, m_stop: int, frames: int, bias: np.ndarray,
                stride: int, y: np.ndarray, c0: int, c1: int) -> None:
    """Output channels ``c0:c1`` of a two-tap upsampler (``fused_ops.Upsampler``: kernel 2 x
    stride, padding stride / 2) for input steps ``m_start:m_stop`` of ``frames``. ``taps``
    [2 * stride * C, n] holds tap ``j`` of channel ``o`` at input step ``first + i`` in row
    ``j * C + o``, column ``i``; full-length output step ``m * stride + p`` is tap ``p`` of step
    ``m`` plus tap ``p + stride`` of step ``m - 1`` (so ``first`` must be ``m_start - 1`` unless
    ``m_start`` is 0, and step ``frames`` adds only the second term); ``y`` [C, frames * stride]
    is that signal from step ``stride / 2`` on, plus the bias."""
    channels = y.shape[0]
    pad = stride // 2
    for o in range(c0, c1):
        b = bias[o]
        out = y[o]
        for p in range(stride):
            now = taps[p * channels + o]  # tap p of step m, at column m - first
            before = taps[(p + stride) * channels + o]  # tap p + stride of step m - 1
            # output step m * stride + p - pad exists for m >= 1 (m >= 0 once p reaches the padding)
            # and up to m = frames (frames - 1 once p reaches it)
            lo = max(m_start, 0 if p >= pad else 1)
            hi = min(m_stop, frames if p >= pad else frames + 1)
            base = p - pad
            m = lo
            if m == 0 and m < hi:  # the first step has no step before it (then first is 0 too)
                out[base] = now[0] + b
                m = 1
            inner_end = min(hi, frames)
            for i in range(m, inner_end):  # both taps: the bulk, a loop LLVM vectorizes
                out[i * stride + base] = (now[i - first] + before[i - 1 - first]) + b
            if hi > frames and frames > 0:  # past the last step only its second tap is left
                out[frames * stride + base] = before[frames - 1 - first] + b


def compile_kernels() -> float:
    """Compile (or load from numba's cache) the kernels for the dtypes the runner passes; return
    the seconds it took. Called when the fused runtime loads, never inside a request."""
    start = time.perf_counter()
    x = np.zeros((2, 8), np.float32)
    ones = np.ones(2, np.float32)
    y = np.empty_like(x)
    scales, shifts = np.empty(2, np.float32), np.empty(2, np.float32)
    mins, maxs = np.empty(2, np.float32), np.empty(2, np.float32)
    for weights, weighted in ((ones, False), (np.ones(8, np.float32), True)):  # the runner's two calls
        snake_stats(x, weights, weighted, ones, ones, 1e-5, True, ones, ones, scales, shifts, mins, maxs, 0, 2)
    col = np.empty((4, 8), np.int8)
    snake_quantize_im2col(x, scales, shifts, ones, ones, np.float32(1.0), 128, 1, 1, 2, 2, col, 0, 2)
    frame_dft(np.zeros((2, 4), np.float32), np.ones((3, 4), np.float32), np.empty((3, 2), np.float32), 0, 3)
    bias_residual(x, ones, x, y, 0, 2)
    row_extremes(x, mins, maxs, 0, 2)
    quantize_rows(x, np.float32(1.0), 128, np.empty((2, 8), np.int8), 0, 2)
    overlap_add(np.zeros((8, 8), np.float32), 0, 0, 9, 8, ones, 2, np.empty((2, 16), np.float32), 0, 2)
    seconds = time.perf_counter() - start
    logger.info("fused-chain kernels ready in %.2f s (numba compile or cache load)", seconds)
    return seconds


@numba.njit(nogil=True, cache=True, fastmath={"nnan", "ninf", "nsz", "contract"})
def frame_dft(phases: np.ndarray, basis: np.ndarray, out: np.ndarray, r0: int, r1: int) -> None:
    """Rows ``r0:r1`` of ``out[r, f] = sum_j basis[r, j] * signal[f * hop + j]`` for every frame
    ``f``, given the signal's polyphase rows ``phases[p, i] = signal[i * hop + p]`` ([hop, blocks];
    ``basis`` [R, taps * hop], zero-padded to whole blocks). Each row is ``taps * hop`` passes over
    contiguous frames (vectorized), with no BLAS threads involved."""
    hop = phases.shape[0]
    taps = basis.shape[1] // hop
    frames = out.shape[1]
    for r in range(r0, r1):
        row = out[r]
        row[:] = 0.0
        for q in range(taps):
            for p in range(hop):
                c = basis[r, q * hop + p]
                src = phases[p]
                for f in range(frames):
                    row[f] += c * src[f + q]


@numba.njit(nogil=True, cache=True)
def bias_residual(x: np.ndarray, bias: np.ndarray, residual: np.ndarray, y: np.ndarray, c0: int, c1: int) -> None:
    """Channels ``c0:c1`` of ``y = (x + bias[:, None]) + residual`` ([C, T] float32), added in
    that order as onnxruntime's two Adds do (no fastmath: bit-identical)."""
    for c in range(c0, c1):
        b = bias[c]
        xr = x[c]
        rr = residual[c]
        out = y[c]
        for t in range(x.shape[1]):
            out[t] = (xr[t] + b) + rr[t]


def spread_channels(pool: Any, parts: int, kernel: Callable[..., None], channels: int, *args: Any) -> None:
    """Run ``kernel(*args, c0, c1)`` on ``parts`` channel ranges: all but the first on ``pool``
    (the runner's helper threads, or None: all on this thread), the first on the calling thread,
    then wait for the rest."""
    parts = max(1, parts)
    bounds = [channels * i // parts for i in range(parts + 1)]  # np.linspace cost ~35 us a call
    ranges = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    futures = [pool.submit(kernel, *args, a, b) for a, b in ranges[1:]] if pool else []
    for a, b in ranges[:1] if pool else ranges:
        kernel(*args, a, b)
    for future in futures:
        future.result()
