"""Vocal-tract and pitch-range adaptation of Kokoro's output towards a prompt speaker.

The style search (``voice_match``) can only blend the five bundled packs; two cues that listeners
and speaker encoders weigh heavily can still be moved by signal processing without a trained model:

- the vocal-tract length, heard as the formant positions: the spectral envelope is warped along the
  frequency axis by ``warp`` (> 1 moves every formant up, a shorter tract), and
- the F0 range: log-F0 deviations around the matched voice's median are scaled by ``f0_range``.
  The median itself is already matched by the search's prosody half, so it is never shifted here.
- the long-term spectral colour: a smooth equalizer (``eq_db``, one gain per quarter-octave-wide
  band, at most ±EQ_LIMIT_DB) that gives the voice the prompt's long-term average spectrum (after
  the warp). It copies the recording's colour, microphone and room included: that is what a
  listener compares the result with (and it moved the independent speaker encoder most).

All are estimated once per voice by comparing the prompt with the matched voice's own speech
(:func:`estimate`): the long-term mean WORLD envelope (CheapTrick over voiced frames, level and
spectral tilt removed), the spread of log F0, and the long-term average spectra. Two ways of applying them are kept so the bench can
compare them (docs/bench-log/asr-and-voices.md, "Voice match adaptation"):

- ``"stft"``: the envelope warp in the short-time spectrum (cepstrally smoothed envelope per frame,
  the harmonics stay where they are, phase kept). It cannot change F0, so ``f0_range`` is not used.
- ``"world"``: WORLD analysis, warped envelope and scaled F0, WORLD synthesis.

:func:`apply` works on one chunk at a time with a fixed gain per voice (no per-chunk level
normalization), so streamed chunks keep their levels; chunks begin and end in near-silence
(``silence.EDGE_PAD_S``), where the processing changes almost nothing.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

METHODS = ("stft", "world")
#: Warp factors searched, about ±18 %: adult vocal tracts differ by up to ~20 % in length, and
#: larger warps make Kokoro's voices sound processed.
WARP_RANGE = (0.84, 1.18)
F0_RANGE_LIMITS = (0.6, 1.6)
#: The envelope is compared on 150 Hz - 5.5 kHz, where the first four formants lie; log-spaced.
PROFILE_BAND_HZ = (150.0, 5500.0)
PROFILE_POINTS = 96
ANALYSIS_RATE = 16000
FRAME_PERIOD_MS = 5.0
N_FFT = 1024  # 43 ms at 24 kHz: resolves harmonics down to ~70 Hz
HOP = 256
#: Equalizer band centres (Hz) and the most any band may be raised or lowered.
EQ_BANDS_HZ = tuple(float(f) for f in np.round(np.geomspace(100.0, 7600.0, 28), 1))
EQ_LIMIT_DB = 12.0
#: The pitch assumed for the STFT warp's lifter when a voice has no measured median F0.
DEFAULT_F0_HZ = 200.0
#: Per-frame gain limit of the STFT warp (±24 dB), so near-silent bins never blow up.
MAX_LOG_GAIN = np.log(16.0)


@dataclass(frozen=True)
class Adaptation:
    """What is applied to every chunk of one voice (stored in the voice's meta)."""

    warp: float = 1.0
    f0_range: float = 1.0
    f0_center_hz: float = 0.0  # the matched voice's median F0: the centre of the range change
    method: str = "stft"
    gain: float = 1.0  # keeps the adapted voice at the level of the unadapted one
    eq_db: tuple[float, ...] = ()  # gain per EQ_BANDS_HZ band; () = no equalizer

    @property
    def is_identity(self) -> bool:
        return (abs(self.warp - 1.0) < 1e-3 and (self.method != "world" or abs(self.f0_range - 1.0) < 1e-3)
                and not any(abs(g) >= 0.05 for g in self.eq_db))

    def scaled(self, strength: float) -> "Adaptation":
        """The same change at a fraction of its size (in log terms): half-way variants."""
        return replace(self, warp=float(self.warp ** strength), f0_range=float(self.f0_range ** strength),
                       eq_db=tuple(round(g * strength, 2) for g in self.eq_db))

    def to_meta(self) -> dict[str, Any]:
        out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        out["eq_db"] = [round(float(g), 2) for g in self.eq_db]
        return out

    @classmethod
    def from_meta(cls, meta: dict | None) -> "Adaptation | None":
        """The voice's adaptation, or None when it has none (or one this code does not know)."""
        if not meta or meta.get("method") not in METHODS:
            return None
        eq = tuple(float(g) for g in meta.get("eq_db") or ())
        if eq and len(eq) != len(EQ_BANDS_HZ):
            eq = ()
        return cls(warp=float(meta.get("warp", 1.0)), f0_range=float(meta.get("f0_range", 1.0)),
                   f0_center_hz=float(meta.get("f0_center_hz", 0.0)), method=meta["method"],
                   gain=float(meta.get("gain", 1.0)), eq_db=eq)

    def describe(self) -> str:
        parts = [f"formants ×{self.warp:.2f}"]
        if self.method == "world" and abs(self.f0_range - 1.0) >= 1e-3:
            parts.append(f"pitch range ×{self.f0_range:.2f}")
        if self.eq_db:
            parts.append(f"spectrum EQ up to {max(abs(g) for g in self.eq_db):.0f} dB")
        return ", ".join(parts) + f" ({self.method})"


def _to_rate(audio: np.ndarray, sample_rate: int, rate: int) -> np.ndarray:
    import soxr

    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    return soxr.resample(x, sample_rate, rate) if sample_rate != rate else x


def _world_f0(x: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    import pyworld

    f0, times = pyworld.dio(x, rate, f0_floor=60.0, f0_ceil=600.0, frame_period=FRAME_PERIOD_MS)
    return pyworld.stonemask(x, f0, times, rate), times


@dataclass(frozen=True)
class VoiceProfile:
    """What :func:`estimate` compares: the mean log envelope on a log-frequency grid (level and tilt
    removed), and the median / spread of log F0 over voiced frames."""

    envelope: np.ndarray
    f0_median_hz: float
    log_f0_spread: float


def profile(audio: np.ndarray, sample_rate: int) -> VoiceProfile:
    """The voice's :class:`VoiceProfile`, analysed at 16 kHz."""
    import pyworld

    x = _to_rate(audio, sample_rate, ANALYSIS_RATE)
    f0, times = _world_f0(x, ANALYSIS_RATE)
    voiced = f0 > 0
    grid = profile_grid()
    if voiced.sum() < 10:
        return VoiceProfile(np.zeros(grid.size), float("nan"), float("nan"))
    sp = pyworld.cheaptrick(x, f0, times, ANALYSIS_RATE)[voiced]
    freqs = np.linspace(0, ANALYSIS_RATE / 2, sp.shape[1])
    mean_log = np.log(sp + 1e-12).mean(axis=0)
    env = np.interp(grid, freqs, mean_log)
    logs = np.log(f0[voiced])
    return VoiceProfile(_flatten(env, grid), float(np.exp(np.median(logs))),
                        float(np.subtract(*np.percentile(logs, [90, 10]))))


def profile_grid() -> np.ndarray:
    return np.geomspace(*PROFILE_BAND_HZ, PROFILE_POINTS)


def _flatten(env: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The envelope less its best line in log frequency: level and tilt depend on the microphone and
    the voice's effort, formant positions on the vocal tract."""
    u = np.log(grid)
    slope, offset = np.polyfit(u, env, 1)
    return env - (slope * u + offset)


def estimate_warp(target: VoiceProfile, source_audio: np.ndarray, sample_rate: int) -> float:
    """The warp that brings the source's envelope closest to the target's (grid search, 1 %
    steps): the source envelope is re-read at f / warp, then flattened the same way."""
    import pyworld

    x = _to_rate(source_audio, sample_rate, ANALYSIS_RATE)
    f0, times = _world_f0(x, ANALYSIS_RATE)
    voiced = f0 > 0
    if voiced.sum() < 10 or not np.any(target.envelope):
        return 1.0
    sp = pyworld.cheaptrick(x, f0, times, ANALYSIS_RATE)[voiced]
    freqs = np.linspace(0, ANALYSIS_RATE / 2, sp.shape[1])
    mean_log = np.log(sp + 1e-12).mean(axis=0)
    grid = profile_grid()
    best, best_err = 1.0, np.inf
    for warp in np.arange(WARP_RANGE[0], WARP_RANGE[1] + 1e-9, 0.01):
        env = _flatten(np.interp(grid / warp, freqs, mean_log), grid)
        err = float(np.mean((env - target.envelope) ** 2))
        if err < best_err:
            best, best_err = float(warp), err
    return round(best, 3)


def estimate(prompt: np.ndarray, prompt_rate: int, source: np.ndarray, source_rate: int,
             method: str) -> Adaptation:
    """The adaptation that moves ``source`` (the matched voice's speech) towards ``prompt``."""
    if method not in METHODS:
        raise ValueError(f"unknown adaptation method {method!r}")
    target = profile(prompt, prompt_rate)
    own = profile(source, source_rate)
    warp = estimate_warp(target, source, source_rate)
    f0_range = 1.0
    if method == "world" and np.isfinite(target.log_f0_spread) and np.isfinite(own.log_f0_spread) \
            and own.log_f0_spread > 1e-3:
        f0_range = float(np.clip(target.log_f0_spread / own.log_f0_spread, *F0_RANGE_LIMITS))
    center = own.f0_median_hz if np.isfinite(own.f0_median_hz) else 0.0
    draft = Adaptation(warp=warp, f0_range=round(f0_range, 3), f0_center_hz=round(center, 1), method=method)
    return with_eq(draft, long_term_spectrum(prompt, prompt_rate), source, source_rate)


def with_eq(adaptation: Adaptation, target_spectrum: np.ndarray, source: np.ndarray, source_rate: int,
            strength: float = 1.0) -> Adaptation:
    """``adaptation`` plus the equalizer (``strength`` of it, 0 = none) that gives the adapted
    source the prompt's long-term average spectrum (``target_spectrum``, from
    :func:`long_term_spectrum`), and the gain that keeps the source's level."""
    base = replace(adaptation, eq_db=(), gain=1.0)
    eq: tuple[float, ...] = ()
    if strength > 0:
        warped = apply(source, source_rate, base)
        diff = target_spectrum - long_term_spectrum(warped, source_rate)
        known = np.isfinite(diff)
        if known.sum() >= 4:
            diff = np.where(known, diff - np.median(diff[known]), 0.0)
            eq = tuple(round(float(g), 2) for g in strength * np.clip(diff, -EQ_LIMIT_DB, EQ_LIMIT_DB))
    draft = replace(base, eq_db=eq)
    processed = apply(source, source_rate, draft)
    gain = _rms(source) / max(_rms(processed), 1e-9)
    return replace(draft, gain=round(float(np.clip(gain, 0.25, 4.0)), 4))


def long_term_spectrum(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mean power (dB) of the speech frames (within 13 dB of the loud ones) per EQ band, over a
    third of an octave around each centre; nan for bands above 90 % of the recording's Nyquist."""
    from scipy.signal import stft

    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    nper = 1024 if sample_rate > 20000 else 512
    freqs, _, spec = stft(x, fs=sample_rate, nperseg=nper)
    power = np.abs(spec) ** 2
    energy = power.sum(axis=0)
    if not energy.size or energy.max() <= 0:
        return np.full(len(EQ_BANDS_HZ), np.nan)
    power = power[:, energy > 0.05 * np.percentile(energy, 95)]
    db = 10 * np.log10(power.mean(axis=1) + 1e-12)
    out = []
    for centre in EQ_BANDS_HZ:
        band = (freqs > centre / 2 ** (1 / 6)) & (freqs < centre * 2 ** (1 / 6))
        out.append(float(db[band].mean()) if band.any() and centre * 2 ** (1 / 6) < 0.45 * sample_rate
                   else np.nan)
    return np.array(out)


def eq_gain_db(adaptation: Adaptation, freqs: np.ndarray) -> np.ndarray:
    """The equalizer's gain (dB) at ``freqs``: interpolated in log frequency, held beyond the ends."""
    if not adaptation.eq_db:
        return np.zeros(freqs.shape)
    return np.interp(np.log(np.maximum(freqs, 1.0)), np.log(EQ_BANDS_HZ), adaptation.eq_db)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(np.asarray(x, dtype=np.float64))))) if np.size(x) else 0.0


def apply(audio: np.ndarray, sample_rate: int, adaptation: Adaptation | None) -> np.ndarray:
    """One chunk, adapted; same length and dtype float32. Identity adaptations return the input."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if adaptation is None or adaptation.is_identity or x.size < N_FFT:
        return x
    if adaptation.method == "world":
        y = _world(x, sample_rate, adaptation)
    else:
        y = _stft_warp(x, sample_rate, adaptation)
    return (y * adaptation.gain).astype(np.float32)


def warp_log_envelope(env: np.ndarray, warp: float) -> np.ndarray:
    """Envelope(s) on a linear frequency axis (last axis), re-read at f / warp: a peak at f moves to
    f * warp. Beyond the top bin the last value holds."""
    bins = np.arange(env.shape[-1], dtype=np.float64)
    src = bins / warp
    lo = np.clip(np.floor(src).astype(int), 0, env.shape[-1] - 1)
    hi = np.clip(lo + 1, 0, env.shape[-1] - 1)
    frac = np.clip(src - lo, 0.0, 1.0)
    return env[..., lo] * (1 - frac) + env[..., hi] * frac


def _stft_warp(x: np.ndarray, sample_rate: int, adaptation: Adaptation) -> np.ndarray:
    """Formant warp in the STFT: each frame's cepstrally smoothed log envelope is replaced by its
    warped copy, the fine structure (harmonics, noise) and the phase are kept; then the equalizer.
    The cepstral lifter sits at half the voice's pitch period: shorter smooths the formants away,
    longer lets the harmonics into the envelope (and the warp would move them)."""
    warp, f0_hz = adaptation.warp, adaptation.f0_center_hz or DEFAULT_F0_HZ
    from scipy.signal import istft, stft

    _, _, spec = stft(x.astype(np.float64), nperseg=N_FFT, noverlap=N_FFT - HOP, window="hann",
                      boundary="even", padded=True)
    log_mag = np.log(np.abs(spec).T + 1e-9)  # [frames, bins]
    cep = np.fft.irfft(log_mag, n=N_FFT, axis=1)
    lifter = int(np.clip(0.5 * sample_rate / f0_hz, 12, N_FFT // 8))
    cep[:, lifter:N_FFT - lifter + 1] = 0.0
    env = np.fft.rfft(cep, n=N_FFT, axis=1).real
    log_gain = np.clip(warp_log_envelope(env, warp) - env, -MAX_LOG_GAIN, MAX_LOG_GAIN)
    freqs = np.arange(log_gain.shape[1]) * sample_rate / N_FFT
    log_gain = log_gain + eq_gain_db(adaptation, freqs) * (np.log(10.0) / 20.0)
    _, y = istft(spec * np.exp(log_gain).T, nperseg=N_FFT, noverlap=N_FFT - HOP, window="hann",
                 boundary=True)
    out = np.zeros(x.size)
    n = min(x.size, y.size)
    out[:n] = y[:n]
    return out


def _world(x: np.ndarray, sample_rate: int, adaptation: Adaptation) -> np.ndarray:
    """WORLD analysis (DIO + StoneMask, CheapTrick, D4C), warped envelope, F0 range scaled around
    the voice's median, WORLD synthesis."""
    import pyworld

    xd = x.astype(np.float64)
    f0, times = _world_f0(xd, sample_rate)
    sp = pyworld.cheaptrick(xd, f0, times, sample_rate)
    ap = pyworld.d4c(xd, f0, times, sample_rate)
    freqs = np.linspace(0.0, sample_rate / 2, sp.shape[1])
    sp = np.exp(warp_log_envelope(np.log(sp + 1e-16), adaptation.warp)
                + eq_gain_db(adaptation, freqs) * (np.log(10.0) / 10.0))  # sp is power
    voiced = f0 > 0
    if adaptation.f0_center_hz > 0 and abs(adaptation.f0_range - 1.0) >= 1e-3:
        center = np.log(adaptation.f0_center_hz)
        f0 = f0.copy()
        f0[voiced] = np.exp(center + adaptation.f0_range * (np.log(f0[voiced]) - center))
    y = pyworld.synthesize(f0, np.ascontiguousarray(sp), np.ascontiguousarray(ap), sample_rate,
                           FRAME_PERIOD_MS)
    out = np.zeros(x.size)
    n = min(x.size, y.size)
    out[:n] = y[:n]
    return out
