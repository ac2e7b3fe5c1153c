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
#: Look-ahead of the limiter: gain starts falling this long before a peak.
LIMITER_LOOKAHEAD_S = 0.01


def _mono(audio: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1))


def pitch_shift(audio: np.ndarray, sample_rate: int, semitones: float) -> np.ndarray:
    """Shift pitch by ``semitones`` keeping duration, formants and loudness (RMS) unchanged."""
    x = _mono(audio)
    if abs(semitones) < MIN_SHIFT_ST or x.size < sample_rate // 20:
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
    logger.debug("pitch shift %+.2f st on %d samples", semitones, x.size)
    return limit(y.astype(np.float32), sample_rate)


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
