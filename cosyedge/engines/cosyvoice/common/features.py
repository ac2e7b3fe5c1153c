"""Prompt features in numpy: the flow's 80-bin mel and the 80-bin Kaldi fbank that campplus reads.

* :func:`mel_spectrogram` / :func:`prompt_mel` - matcha's ``mel_spectrogram`` as CosyVoice2 configures
  it (24 kHz, n_fft 1920, hop 480, win 1920, fmin 0, fmax 8000, reflect padding of (n_fft-hop)/2 on
  both sides, magnitude ``sqrt(re^2 + im^2 + 1e-9)``, Slaney mel filters, ``log(max(x, 1e-5))``).
* :func:`kaldi_fbank` / :func:`campplus_features` - ``torchaudio.compliance.kaldi.fbank`` with the
  arguments upstream uses (16 kHz, 80 bins, dither 0; otherwise Kaldi defaults: 25/10 ms frames,
  snip edges, DC removal, pre-emphasis 0.97, Povey window, 512-point power spectrum, bins from 20 Hz to
  Nyquist, natural log floored at float32 epsilon), then per-utterance mean removal.

Own code rather than librosa/torchaudio at run time: both are small formulas, this keeps the runtime
to numpy, and the tests check them against librosa + matcha (mel) and kaldi-native-fbank (fbank).
"""

from __future__ import annotations

import functools
import logging

import numpy as np

from cosyedge.errors import AudioError

logger = logging.getLogger(__name__)

#: CosyVoice2's flow-mel settings (``feat_extractor`` in cosyvoice2.yaml).
MEL_DEFAULTS = {"sample_rate": 24000, "n_fft": 1920, "hop_size": 480, "win_size": 1920, "num_mels": 80,
                "fmin": 0.0, "fmax": 8000.0}


def _hz_to_mel_slaney(freq: np.ndarray) -> np.ndarray:
    freq = np.asarray(freq, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    linear = freq / f_sp
    log_part = min_log_mel + np.log(np.maximum(freq, min_log_hz) / min_log_hz) / logstep
    return np.where(freq >= min_log_hz, log_part, linear)


def _mel_to_hz_slaney(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), f_sp * mels)


@functools.lru_cache(maxsize=8)
def slaney_mel_filters(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> np.ndarray:
    """Triangular Slaney-scale filters with Slaney area normalisation: [n_mels, n_fft/2 + 1] float32."""
    fmax = sample_rate / 2.0 if fmax is None else fmax
    fft_freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    mel_pts = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin), _hz_to_mel_slaney(fmax), n_mels + 2))
    widths = np.diff(mel_pts)
    ramps = mel_pts[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_pts[2:] - mel_pts[:-2]))[:, None]
    weights = weights.astype(np.float32)
    weights.setflags(write=False)
    return weights


def _as_wave(wav, min_samples: int, what: str) -> np.ndarray:
    arr = np.asarray(wav, dtype=np.float32)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise AudioError(f"{what}: expected mono audio (one channel), got shape {arr.shape}")
    if arr.shape[0] < min_samples:
        raise AudioError(f"{what}: audio too short ({arr.shape[0]} samples, need at least {min_samples})")
    if not np.all(np.isfinite(arr)):
        raise AudioError(f"{what}: audio contains NaN or infinite samples")
    return arr


def mel_spectrogram(wav, sample_rate: int = 24000, n_fft: int = 1920, hop_size: int = 480,
                    win_size: int = 1920, num_mels: int = 80, fmin: float = 0.0,
                    fmax: float | None = 8000.0) -> np.ndarray:
    """Log-mel [num_mels, len // hop_size] of float audio in [-1, 1] at ``sample_rate``."""
    pad = (n_fft - hop_size) // 2
    y = _as_wave(wav, pad + 1, "prompt mel")
    y = np.pad(y, pad, mode="reflect")
    n_frames = 1 + (y.shape[0] - n_fft) // hop_size
    window = np.zeros(n_fft, dtype=np.float64)
    offset = (n_fft - win_size) // 2
    window[offset:offset + win_size] = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(win_size) / win_size)
    frames = np.lib.stride_tricks.sliding_window_view(y, n_fft)[::hop_size][:n_frames]
    spec = np.fft.rfft(frames * window, axis=1)
    magnitude = np.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9).astype(np.float32)
    filters = slaney_mel_filters(sample_rate, n_fft, num_mels, float(fmin), None if fmax is None else float(fmax))
    mel = filters @ magnitude.T
    return np.log(np.maximum(mel, np.float32(1e-5))).astype(np.float32)


def prompt_mel(wav24k, settings: dict | None = None) -> np.ndarray:
    """The flow's prompt features, frames first: [frames, 80] (upstream's ``prompt_speech_feat``)."""
    params = {**MEL_DEFAULTS, **(settings or {})}
    return mel_spectrogram(wav24k, **params).T.copy()


# ----------------------------------------------------------------------------------------------
# Kaldi fbank
# ----------------------------------------------------------------------------------------------

def _kaldi_mel(freq: np.ndarray) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


@functools.lru_cache(maxsize=4)
def kaldi_mel_banks(num_bins: int, padded_window: int, sample_rate: float, low_freq: float,
                    high_freq: float) -> np.ndarray:
    """Kaldi's triangular mel banks (linear in Kaldi's mel scale): [num_bins, padded_window/2 + 1]."""
    nyquist = 0.5 * sample_rate
    if high_freq <= 0.0:
        high_freq += nyquist
    n_fft_bins = padded_window // 2
    mel_low, mel_high = _kaldi_mel(low_freq), _kaldi_mel(high_freq)
    delta = (mel_high - mel_low) / (num_bins + 1)
    left = mel_low + np.arange(num_bins)[:, None] * delta
    center, right = left + delta, left + 2.0 * delta
    mel = _kaldi_mel(sample_rate / padded_window * np.arange(n_fft_bins))[None, :]
    up, down = (mel - left) / (center - left), (right - mel) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    banks = np.concatenate([banks, np.zeros((num_bins, 1))], axis=1)   # the Nyquist bin gets no weight
    banks = banks.astype(np.float32)
    banks.setflags(write=False)
    return banks


def kaldi_fbank(wav16k, num_mel_bins: int = 80, sample_rate: int = 16000, frame_length_ms: float = 25.0,
                frame_shift_ms: float = 10.0, preemph: float = 0.97, low_freq: float = 20.0,
                high_freq: float = 0.0) -> np.ndarray:
    """Kaldi log-mel filterbank [frames, num_mel_bins] (no dither, snip edges), as torchaudio computes it."""
    win = int(sample_rate * frame_length_ms / 1000)
    shift = int(sample_rate * frame_shift_ms / 1000)
    x = _as_wave(wav16k, win, "speaker features")
    n_frames = 1 + (x.shape[0] - win) // shift
    frames = np.lib.stride_tricks.sliding_window_view(x, win)[::shift][:n_frames].astype(np.float64)
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = frames - preemph * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    povey = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(win) / (win - 1))) ** 0.85
    padded = 1 << (win - 1).bit_length()
    spec = np.fft.rfft(frames * povey, n=padded, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    banks = kaldi_mel_banks(num_mel_bins, padded, float(sample_rate), low_freq, high_freq)
    energies = power @ banks.T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


def campplus_features(wav16k) -> np.ndarray:
    """campplus input: Kaldi fbank of 16 kHz audio minus its mean over time, [frames, 80] float32."""
    feats = kaldi_fbank(wav16k)
    return (feats - feats.mean(axis=0, keepdims=True)).astype(np.float32)
