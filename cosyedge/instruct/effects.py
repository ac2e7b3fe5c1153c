"""Post-processing for the embedded engine: pitch shift without a speed change, gain with a limiter.

Pitch: the WORLD vocoder (``pyworld``) splits speech into F0, spectral envelope and aperiodicity;
only F0 is scaled and the voice is resynthesized, so duration and formants stay put (a resample
would change both). Gain: a plain multiply followed by a look-ahead peak limiter, so a louder
request makes speech louder but never clips. All audio is mono float32 in [-1, 1].
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

#: Peak level the limiter keeps to (about -0.26 dBFS).
CEILING = 0.97
#: WORLD analysis hop; 5 ms is WORLD's default and good for speech.
FRAME_PERIOD_MS = 5.0
#: Shifts smaller than this are inaudible; skip the resynthesis.
MIN_SHIFT_ST = 0.05
#: Longest piece pitch shifting works on (bounds WORLD's memory when a text has no pauses).
MAX_PIECE_S = 12.0
#: A pause: at least this long below this level (the joiner puts 0.18 s of zeros between sentences).
PAUSE_MIN_S = 0.08
PAUSE_LEVEL = 1e-4
#: Look-ahead of the limiter: gain starts falling this long before a peak.
LIMITER_LOOKAHEAD_S = 0.01


def _mono(audio: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1))


def pitch_shift(audio: np.ndarray, sample_rate: int, semitones: float) -> np.ndarray:
    """Shift pitch by ``semitones`` keeping duration, formants and loudness (RMS) unchanged.

    The audio is cut at its pauses (sentence gaps) and each piece is shifted on its own, so pauses
    stay silent and WORLD's per-frame spectra (about 8 MB per second of audio) never pile up over a
    long text; a piece never exceeds ``MAX_PIECE_S``.
    """
    x = _mono(audio)
    if abs(semitones) < MIN_SHIFT_ST or x.size < sample_rate // 20:
        return x
    out = np.zeros_like(x)
    for start, end in pieces(x, sample_rate):
        loud = np.flatnonzero(np.abs(x[start:end]) >= PAUSE_LEVEL)
        if loud.size:  # shift the sound only; the pause around it stays as it was
            a, b = start + int(loud[0]), start + int(loud[-1]) + 1
            out[start:a], out[b:end] = x[start:a], x[b:end]
            out[a:b] = _shift_piece(x[a:b], sample_rate, semitones)
        else:
            out[start:end] = x[start:end]
    logger.debug("pitch shift %+.2f st on %d samples", semitones, x.size)
    return limit(out, sample_rate)


def pieces(x: np.ndarray, sample_rate: int, max_s: float = 0.0) -> list[tuple[int, int]]:
    """[start, end) spans covering ``x``, cut in the middle of every pause; a pause-free stretch
    longer than ``max_s`` (``MAX_PIECE_S`` by default) is cut where it must be."""
    max_len = int((max_s or MAX_PIECE_S) * sample_rate)
    quiet = np.concatenate(([False], np.abs(x) < PAUSE_LEVEL, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(quiet))  # alternating starts and ends of quiet runs
    cuts = [int(a + b) // 2 for a, b in zip(edges[::2], edges[1::2])
            if b - a >= PAUSE_MIN_S * sample_rate and 0 < a and b < x.size]
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in cuts + [x.size]:
        while cut - start > max_len:
            spans.append((start, start + max_len))
            start += max_len
        if cut > start:
            spans.append((start, cut))
        start = cut
    return spans


def _shift_piece(x: np.ndarray, sample_rate: int, semitones: float) -> np.ndarray:
    if x.size < sample_rate // 20:
        return x
    try:
        import pyworld
    except ImportError as exc:  # pinned in requirements.txt; say how to fix rather than crash oddly
        from cosyedge.errors import EngineError

        raise EngineError("pitch shifting needs pyworld: pip install -r requirements.txt") from exc
    x64 = x.astype(np.float64)
    f0, t = pyworld.dio(x64, sample_rate, frame_period=FRAME_PERIOD_MS)
    f0 = pyworld.stonemask(x64, f0, t, sample_rate)
    sp = pyworld.cheaptrick(x64, f0, t, sample_rate)
    ap = pyworld.d4c(x64, f0, t, sample_rate)
    y = pyworld.synthesize(f0 * 2.0 ** (semitones / 12.0), sp, ap, sample_rate,
                           frame_period=FRAME_PERIOD_MS)
    y = y[: x.size] if y.size >= x.size else np.pad(y, (0, x.size - y.size))
    rms_in, rms_out = _rms(x), _rms(y)
    if rms_out > 1e-9:
        y *= rms_in / rms_out
    return y.astype(np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def limit(audio: np.ndarray, sample_rate: int, ceiling: float = CEILING,
          lookahead_s: float = LIMITER_LOOKAHEAD_S) -> np.ndarray:
    """Look-ahead peak limiter: the result never exceeds ``ceiling`` and changes gain smoothly.

    The needed gain per sample is ``min(1, ceiling/|x|)``. A minimum filter of half-width L spreads
    each reduction L samples to both sides, and a moving average of width <= L+1 smooths it; every
    averaged value still comes from windows that contain the peak, so the gain at a peak is never
    above what that peak needs.
    """
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    x = _mono(audio)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak <= ceiling:
        return x
    half = max(1, int(lookahead_s * sample_rate))
    need = np.minimum(1.0, ceiling / np.maximum(np.abs(x), 1e-12))
    gain = minimum_filter1d(need, size=2 * half + 1, mode="nearest")
    gain = uniform_filter1d(gain, size=half + 1, mode="nearest")
    return np.clip(x * gain, -ceiling, ceiling).astype(np.float32)


def apply_gain(audio: np.ndarray, gain_db: float, sample_rate: int, ceiling: float = CEILING
               ) -> np.ndarray:
    """Multiply by ``gain_db`` decibels, then limit peaks to ``ceiling`` (never clips)."""
    x = _mono(audio)
    if gain_db:
        x = x * np.float32(10.0 ** (gain_db / 20.0))
    return limit(x, sample_rate, ceiling)
