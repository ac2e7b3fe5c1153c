"""Our numpy Whisper log-mel against ``openai-whisper``'s own ``log_mel_spectrogram`` (torch).

The reference is the real function from the ``openai-whisper`` wheel (installed ``--no-deps`` by
scripts/install_reference.sh; it reads the ``mel_filters.npz`` the wheel ships and downloads nothing).
Only ``whisper/audio.py`` is imported, under a bare package stub, because ``whisper/__init__.py`` pulls
numba, tiktoken and the model code, none of which the mel needs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common.whisper_mel import log_mel_spectrogram, mel_filters


pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


@pytest.fixture(scope="module")
def whisper_audio():
    pytest.importorskip("torch", reason="reference: scripts/install_reference.sh .venv")
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openai-whisper is not installed: scripts/install_reference.sh .venv")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "whisper" or k.startswith("whisper.")}
    stub = types.ModuleType("whisper")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["whisper"] = stub
    try:
        yield importlib.import_module("whisper.audio")
    finally:
        for k in [k for k in sys.modules if k == "whisper" or k.startswith("whisper.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _signal(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    voice = 0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.1 * np.sin(2 * np.pi * 3 * t)))
    return (voice + 0.02 * rng.normal(size=t.size)).astype(np.float32)


def test_filters_equal_whisper_asset(whisper_audio):
    import torch

    ref = whisper_audio.mel_filters(torch.device("cpu"), 128).numpy()
    np.testing.assert_allclose(mel_filters(128), ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("seconds", [0.05, 1.0, 3.37, 12.0])
def test_log_mel_matches_whisper(whisper_audio, seconds):
    import torch

    audio = _signal(seconds, seed=int(seconds * 100))
    want = whisper_audio.log_mel_spectrogram(torch.from_numpy(audio), n_mels=128).numpy()
    got = log_mel_spectrogram(audio)
    assert got.shape == want.shape == (128, audio.size // 160)
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_silence_and_clipping_are_finite():
    mel = log_mel_spectrogram(np.zeros(16000, dtype=np.float32))
    assert np.isfinite(mel).all() and mel.shape == (128, 100)
    loud = np.clip(_signal(1.0) * 100, -1, 1)
    assert np.isfinite(log_mel_spectrogram(loud)).all()
