"""Prompt features in numpy against their references.

* flow mel vs upstream ``matcha.utils.audio.mel_spectrogram`` (torch + librosa filters): 1e-4 absolute on
  log-mel values of about -11..2 (measured ~2e-6; float64 vs float32 FFT is the only difference);
* Slaney filters vs ``librosa.filters.mel``: 1e-6;
* Kaldi fbank vs ``kaldi-native-fbank`` (a C++ re-implementation of Kaldi's compute-fbank-feats, the
  algorithm ``torchaudio.compliance.kaldi.fbank`` follows): 1e-3 absolute on log energies (measured
  ~5e-5; both sides are float32).
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common import features
from cosyedge.errors import AudioError


pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


def _voice_like(sample_rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    wave = sum(0.2 / k * np.sin(k * phase) for k in range(1, 8))
    wave = wave * (0.5 + 0.5 * np.sin(2 * np.pi * 1.3 * t) ** 2) + 0.02 * rng.standard_normal(t.size)
    return wave.astype(np.float32)


def test_slaney_filters_match_librosa():
    import librosa  # a runtime requirement (requirements.txt)
    ours = features.slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0)
    np.testing.assert_allclose(ours, librosa.filters.mel(sr=24000, n_fft=1920, n_mels=80, fmin=0, fmax=8000),
                               atol=1e-6, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("n_samples", [24000, 24000 * 2 + 123])
def test_flow_mel_matches_matcha(n_samples):
    from tests.helpers import cosyvoice_reference as ref
    ref.install_shim()
    import torch
    mel_ref_fn = ref.matcha_mel_spectrogram()
    wave = _voice_like(24000, n_samples / 24000)[:n_samples]
    expected = mel_ref_fn(torch.from_numpy(wave)[None], n_fft=1920, num_mels=80, sampling_rate=24000,
                          hop_size=480, win_size=1920, fmin=0, fmax=8000, center=False)[0].numpy()
    ours = features.mel_spectrogram(wave)
    assert ours.shape == expected.shape == (80, n_samples // 480)
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    prompt = features.prompt_mel(wave)
    assert prompt.shape == (n_samples // 480, 80)
    np.testing.assert_array_equal(prompt, ours.T)


def _knf_fbank(wave: np.ndarray) -> np.ndarray:
    import kaldi_native_fbank as knf  # dev requirement (requirements-dev.txt)
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = 80
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(16000, wave.tolist())
    fbank.input_finished()
    return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])


@pytest.mark.parametrize("seconds", [0.5, 3.21])
def test_kaldi_fbank_matches_kaldi_native_fbank(seconds):
    wave = _voice_like(16000, seconds, seed=1)
    expected = _knf_fbank(wave)
    ours = features.kaldi_fbank(wave)
    assert ours.shape == expected.shape == (1 + (wave.size - 400) // 160, 80)
    np.testing.assert_allclose(ours, expected, atol=1e-3, rtol=0)


def test_campplus_features_are_mean_normalised():
    wave = _voice_like(16000, 2.0, seed=2)
    feats = features.campplus_features(wave)
    np.testing.assert_allclose(feats.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(feats, features.kaldi_fbank(wave) - features.kaldi_fbank(wave).mean(axis=0),
                               atol=1e-5)


def test_silence_is_floored_not_minus_infinity():
    zeros = np.zeros(16000, dtype=np.float32)
    assert np.isfinite(features.kaldi_fbank(zeros)).all()
    assert np.isfinite(features.mel_spectrogram(np.zeros(24000, dtype=np.float32))).all()


@pytest.mark.parametrize("bad", [np.zeros(100, dtype=np.float32), np.zeros((2, 16000), dtype=np.float32),
                                 np.full(16000, np.nan, dtype=np.float32)])
def test_bad_audio_is_an_audio_error(bad):
    with pytest.raises(AudioError):
        features.kaldi_fbank(bad)
    with pytest.raises(AudioError):
        features.mel_spectrogram(bad)
