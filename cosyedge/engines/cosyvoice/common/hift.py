"""HiFT vocoder at run time: mel [80, T] -> 24 kHz waveform, with onnxruntime + numpy only.

The two ONNX graphs (F0 predictor, decoder network) come from the converter. What they leave out runs
here in numpy, step for step as upstream ``HiFTGenerator.inference`` does it at 24 kHz:

1. F0 per frame (graph) -> nearest upsampling to samples.
2. Harmonic excitation (``SineGen2``): 9 harmonics, phase by cumulative sum at frame rate, linear
   upsampling, voiced/unvoiced noise, then ``tanh(Linear(9 -> 1))``. The noise is an input (drawn from a
   numpy generator by default); upstream's random initial phase never reaches the output at 24 kHz
   (the frame-rate resampling reads sample 239.5 of each frame, not sample 0), so it is not modelled.
3. STFT of the excitation (n_fft 16, hop 4, periodic Hann, centred, reflect padding).
4. Decoder graph -> real/imag spectrum; inverse STFT with window-square normalisation; clamp.

Streaming (:class:`HiftStream`) follows upstream ``CosyVoice2Model.token2wav`` at 46dfe04: each hop
vocodes its own mel with the previous hop's last 8 mel frames in front, the first 8 x 480 source
samples replaced by the previous hop's, Hamming cross-fades the first 3840 samples with the tail held
back from the previous hop, and holds back its own last 3840 samples (all of them at the end).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HiftParams:
    """Vocoder constants written by the converter into the manifest."""

    sampling_rate: int = 24000
    samples_per_frame: int = 480
    nb_harmonics: int = 8
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    n_fft: int = 16
    hop_len: int = 4
    audio_limit: float = 0.99

    @classmethod
    def from_dict(cls, values: dict) -> "HiftParams":
        known = {k: values[k] for k in cls.__dataclass_fields__ if k in values}
        return cls(**known)


def periodic_hann(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)).astype(np.float32)


def _linear_upsample(x: np.ndarray, factor: int) -> np.ndarray:
    """``F.interpolate(mode='linear', align_corners=False, scale_factor=factor)`` along axis 0, in float32."""
    n_in = x.shape[0]
    scale = np.float32(1.0 / factor)
    dst = np.arange(n_in * factor, dtype=np.float32)
    src = np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0.0))
    i0 = src.astype(np.int64)
    lam1 = (src - i0.astype(np.float32))[:, None]
    i1 = np.minimum(i0 + 1, n_in - 1)
    return (np.float32(1.0) - lam1) * x[i0] + lam1 * x[i1]


def _nearest_index(n_in: int, factor: int) -> np.ndarray:
    """Source index of ``nn.Upsample(scale_factor=factor)`` (nearest), computed as torch does in float32."""
    dst = np.arange(n_in * factor, dtype=np.float32)
    return np.minimum(np.floor(dst * np.float32(1.0 / factor)).astype(np.int64), n_in - 1)


def excitation(f0: np.ndarray, noise: np.ndarray, weight: np.ndarray, bias: np.ndarray,
               params: HiftParams) -> np.ndarray:
    """Harmonic-plus-noise source for F0 frames ``f0`` [T] -> excitation [T * samples_per_frame].

    ``noise`` is standard normal [T * samples_per_frame, nb_harmonics + 1]; ``weight`` [1, H+1] and
    ``bias`` [1] are the checkpoint's ``m_source.l_linear``.
    """
    f0 = np.asarray(f0, dtype=np.float32).reshape(-1)
    spf = params.samples_per_frame
    harmonics = np.arange(1, params.nb_harmonics + 2, dtype=np.float32)
    f0_samples = f0[_nearest_index(f0.shape[0], spf)]                        # [L]
    # Phase increments per sample are constant within a frame; upstream's frame-rate resampling of
    # them reads one value per frame, so work at frame rate directly.
    rad = np.mod(f0[:, None] * harmonics[None, :] / np.float32(params.sampling_rate), np.float32(1.0))
    phase = np.cumsum(rad.astype(np.float64), axis=0).astype(np.float32)   # torch accumulates in double
    phase = (phase * np.float32(2.0)) * np.float32(np.pi)
    phase = phase * np.float32(spf)
    sines = np.sin(_linear_upsample(phase, spf)) * np.float32(params.nsf_alpha)
    uv = (f0_samples > params.nsf_voiced_threshold).astype(np.float32)[:, None]
    noise_amp = uv * np.float32(params.nsf_sigma) + (np.float32(1.0) - uv) * np.float32(params.nsf_alpha / 3)
    waves = sines * uv + noise_amp * noise.astype(np.float32, copy=False)
    merged = waves @ weight.astype(np.float32).T + bias.astype(np.float32)
    return np.tanh(merged[:, 0]).astype(np.float32)


def stft(x: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """Centred STFT (reflect pad, periodic Hann): [L] -> [n_fft + 2, L // hop + 1] as real ‖ imag."""
    padded = np.pad(np.asarray(x, dtype=np.float32), n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop] * periodic_hann(n_fft)
    spec = np.fft.rfft(frames, axis=1)                                      # [F, n_fft/2+1]
    return np.concatenate([spec.real.T, spec.imag.T], axis=0).astype(np.float32)


def istft(real: np.ndarray, imag: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """Inverse of :func:`stft` as ``torch.istft(center=True)``: [n_fft/2+1, F] x 2 -> [hop * (F - 1)]."""
    if n_fft % hop:
        raise ValueError("n_fft must be a multiple of hop")
    window = periodic_hann(n_fft)
    frames = np.fft.irfft(real.T.astype(np.float64) + 1j * imag.T.astype(np.float64), n=n_fft, axis=1)
    frames = (frames * window).astype(np.float32)
    n_frames, per = frames.shape[0], n_fft // hop
    out = np.zeros((n_frames + per - 1, hop), dtype=np.float32)
    env = np.zeros((n_frames + per - 1, hop), dtype=np.float32)
    shaped = frames.reshape(n_frames, per, hop)
    win_sq = (window ** 2).reshape(per, hop)
    for j in range(per):
        out[j:j + n_frames] += shaped[:, j, :]
        env[j:j + n_frames] += win_sq[j]
    start, length = n_fft // 2, hop * (n_frames - 1)
    out = out.reshape(-1)[start:start + length]
    env = env.reshape(-1)[start:start + length]
    return out / np.where(env > 1e-11, env, 1.0)


class HiftVocoder:
    """mel -> waveform with two ONNX sessions and the numpy DSP above.

    Built from ready sessions (tests can pass fakes); :meth:`from_model_dir` does the file work.
    """

    def __init__(self, f0_session, decoder_session, source_weight: np.ndarray, source_bias: np.ndarray,
                 params: HiftParams) -> None:
        self.f0_session = f0_session
        self.decoder_session = decoder_session
        self.source_weight = np.asarray(source_weight, dtype=np.float32)
        self.source_bias = np.asarray(source_bias, dtype=np.float32)
        self.params = params

    def f0(self, mel: np.ndarray) -> np.ndarray:
        """mel [80, T] -> F0 in Hz [T]."""
        out = self.f0_session.run(None, {"mel": mel[None].astype(np.float32, copy=False)})[0]
        return out[0]

    def source(self, mel: np.ndarray, noise: np.ndarray | None = None,
               rng: np.random.Generator | None = None) -> np.ndarray:
        """Excitation [T * 480] for ``mel``; ``noise`` [T*480, 9] overrides the random draw."""
        n = mel.shape[1] * self.params.samples_per_frame
        if noise is None:
            rng = rng if rng is not None else np.random.default_rng()
            noise = rng.standard_normal((n, self.params.nb_harmonics + 1), dtype=np.float32)
        elif noise.shape != (n, self.params.nb_harmonics + 1):
            raise ValueError(f"noise must have shape {(n, self.params.nb_harmonics + 1)}, got {noise.shape}")
        return excitation(self.f0(mel), noise, self.source_weight, self.source_bias, self.params)

    def decode(self, mel: np.ndarray, source: np.ndarray) -> np.ndarray:
        """mel [80, T] + excitation [T * 480] -> waveform [T * 480], clamped to the audio limit."""
        p = self.params
        spec = stft(source, p.n_fft, p.hop_len)
        real, imag = self.decoder_session.run(
            None, {"mel": mel[None].astype(np.float32, copy=False), "source_stft": spec[None]})
        wav = istft(real[0], imag[0], p.n_fft, p.hop_len)
        return np.clip(wav, -p.audio_limit, p.audio_limit).astype(np.float32)

    def __call__(self, mel: np.ndarray, noise: np.ndarray | None = None,
                 rng: np.random.Generator | None = None) -> np.ndarray:
        mel = np.asarray(mel, dtype=np.float32)
        if mel.ndim != 2 or mel.shape[0] != 80 or mel.shape[1] == 0:
            raise ValueError(f"mel must have shape [80, T>0], got {mel.shape}")
        return self.decode(mel, self.source(mel, noise=noise, rng=rng))


class HiftStream:
    """One utterance's vocoder state between hops (upstream's ``hift_cache_dict`` entry)."""

    def __init__(self, vocoder: HiftVocoder, mel_cache_frames: int = 8,
                 rng: np.random.Generator | None = None) -> None:
        self.vocoder = vocoder
        self.mel_cache_frames = mel_cache_frames
        self.source_cache_len = mel_cache_frames * vocoder.params.samples_per_frame
        self.window = np.hamming(2 * self.source_cache_len)
        self.rng = rng if rng is not None else np.random.default_rng()
        self._mel: np.ndarray | None = None      # [80, 8]
        self._source: np.ndarray | None = None   # [3840]
        self._speech: np.ndarray | None = None   # [3840], not yet emitted
        self._finished = False

    def held_back(self) -> np.ndarray | None:
        """The samples after the last hop's, computed but not yet sent (faded into the next hop)."""
        return self._speech

    def push(self, mel: np.ndarray, final: bool = False, noise: np.ndarray | None = None) -> np.ndarray:
        """Audio for the hop ``mel`` [80, T]; ``final`` flushes the held-back tail. ``noise`` (for the
        source, [(8 + T) * 480, 9] after the first hop) overrides the random draw, for parity tests."""
        if self._finished:
            raise ValueError("this vocoder stream is finished")
        mel = np.asarray(mel, dtype=np.float32)
        if self._mel is not None:
            mel = np.concatenate([self._mel, mel], axis=1)
        if mel.shape[1] == 0:
            self._finished = final
            return np.zeros(0, dtype=np.float32)
        source = self.vocoder.source(mel, noise=noise, rng=self.rng)
        if self._source is not None:
            source[:self._source.shape[0]] = self._source
        speech = self.vocoder.decode(mel, source)
        if self._speech is not None:
            n = self.source_cache_len
            speech[:n] = (speech[:n] * self.window[:n] + self._speech * self.window[n:]).astype(np.float32)
        if final:
            self._finished = True
            self._mel = self._source = self._speech = None
            return speech
        self._mel = mel[:, -self.mel_cache_frames:]
        self._source = source[-self.source_cache_len:]
        self._speech = speech[-self.source_cache_len:]
        return speech[:-self.source_cache_len]
