"""Whisper's log-mel spectrogram in numpy: the input of CosyVoice2's speech tokenizer (16 kHz, 128 bins).

Same recipe as ``whisper.log_mel_spectrogram(audio, n_mels=128)``: 400-point STFT with a periodic
Hann window, hop 160, centered with reflect padding, last frame dropped, power spectrum, Slaney mel
filters (librosa's, which whisper ships pre-computed), ``log10`` floored at 1e-10 and at max - 8,
then ``(x + 4) / 4``. Output ``[128, frames]`` float32, 100 frames per second.
"""

from __future__ import annotations

import functools
import logging

import numpy as np

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 128


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int = N_MELS) -> np.ndarray:
    """Slaney-style mel filterbank ``[n_mels, N_FFT // 2 + 1]`` (what whisper's mel_filters.npz holds)."""
    import librosa

    return librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=n_mels).astype(np.float32)


def _frames(audio: np.ndarray) -> np.ndarray:
    """Centered, reflect-padded frames ``[n_frames, N_FFT]`` (torch.stft(center=True) framing)."""
    pad = N_FFT // 2
    if audio.size <= pad:  # reflect padding needs more samples than the pad; upstream would fail too
        audio = np.pad(audio, (0, pad + 1 - audio.size))
    padded = np.pad(audio, (pad, pad), mode="reflect")
    n_frames = 1 + (padded.size - N_FFT) // HOP
    return np.lib.stride_tricks.as_strided(padded, shape=(n_frames, N_FFT),
                                           strides=(padded.strides[0] * HOP, padded.strides[0]))


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = N_MELS) -> np.ndarray:
    """Whisper log-mel of mono 16 kHz float audio, ``[n_mels, len(audio) // 160]`` float32."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    spec = np.fft.rfft(_frames(audio) * window, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)[:-1]   # drop the last frame
    mel = mel_filters(n_mels) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
