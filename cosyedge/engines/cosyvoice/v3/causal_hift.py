"""CosyVoice3's causal HiFT vocoder at run time: mel [80, T] -> 24 kHz waveform (onnxruntime + numpy).

Step for step as upstream ``CausalHiFTGenerator.inference(finalize=True)``:

1. F0 per frame from the causal F0 predictor (five convs, the first looking 3 frames ahead), run in
   float64 with numpy as upstream runs it in float64; the weights come from the converter's ``hift_f0.npz``.
2. Harmonic excitation (causal ``SineGen2``): 9 harmonics, phase by cumulative sum at frame rate and
   *nearest* upsampling to samples, voiced/unvoiced noise, ``tanh(Linear(9 -> 1))``. Upstream draws a
   fixed uniform [0, 1) buffer of 300 s x 9 harmonics (~259 MB) at construction and reads its start on
   every call; this vocoder draws the same kind of noise for the samples it needs only, from a fixed
   seed (so a call is deterministic, as upstream's is), or takes it as an argument (parity tests).
   Upstream's random initial phase never reaches the output (the frame-rate resampling reads the middle
   of each frame) and its second buffer (``uv``) is not used for the waveform, so neither is modelled.
3. STFT of the excitation, the decoder graph, inverse STFT, clamp: CosyVoice2's vocoder
   (``hift.HiftVocoder``, which this one extends).
"""

from __future__ import annotations

import logging

import numpy as np

from cosyedge.engines.cosyvoice.common.hift import HiftParams, HiftVocoder

logger = logging.getLogger(__name__)

#: Seed of the run-time sine noise (any fixed value: upstream's buffer is random too).
NOISE_SEED = 1986
F0_LAYERS = 5
#: Mel frames before the first sample a streamed call must produce that it vocodes again: more than
#: the decoder's reach to the left (its causal convolutions, resblocks and source path reach about 25
#: frames back at upstream's sizes), so what it produces equals the whole-mel computation.
DECODER_MARGIN = 48


def _conv1d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, left: int, right: int) -> np.ndarray:
    """float64 Conv1d of x [Cin, T] with zero padding (left, right): -> [Cout, T + left + right - k + 1]."""
    cout, cin, k = weight.shape
    padded = np.pad(x, ((0, 0), (left, right)))
    cols = np.lib.stride_tricks.sliding_window_view(padded, k, axis=1)       # [Cin, T', k]
    cols = np.ascontiguousarray(cols.transpose(0, 2, 1)).reshape(cin * k, -1)
    return weight.reshape(cout, cin * k) @ cols + bias[:, None]


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


class CausalF0Predictor:
    """The causal F0 predictor in float64: mel [80, T] -> F0 in Hz [T] (float32, as upstream casts)."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.convs = [(np.asarray(weights[f"condnet_{2 * i}_weight"], dtype=np.float64),
                       np.asarray(weights[f"condnet_{2 * i}_bias"], dtype=np.float64)) for i in range(F0_LAYERS)]
        self.head = (np.asarray(weights["classifier_weight"], dtype=np.float64),
                     np.asarray(weights["classifier_bias"], dtype=np.float64))

    def __call__(self, mel: np.ndarray) -> np.ndarray:
        x = np.asarray(mel, dtype=np.float64)
        for i, (w, b) in enumerate(self.convs):
            k = w.shape[2]
            # Layer 0 looks ahead (right padding k - 1); the others look back.
            x = _elu(_conv1d(x, w, b, 0, k - 1) if i == 0 else _conv1d(x, w, b, k - 1, 0))
        w, b = self.head
        return np.abs(w @ x + b[:, None])[0].astype(np.float32)


def causal_excitation(f0: np.ndarray, noise: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                      params: HiftParams) -> np.ndarray:
    """Causal harmonic-plus-noise source: F0 frames [T] + uniform noise [T*spf, H+1] -> excitation [T*spf]."""
    f0 = np.asarray(f0, dtype=np.float32).reshape(-1)
    spf = params.samples_per_frame
    harmonics = np.arange(1, params.nb_harmonics + 2, dtype=np.float32)
    rad = np.mod(f0[:, None] * harmonics[None, :] / np.float32(params.sampling_rate), np.float32(1.0))
    phase = np.cumsum(rad.astype(np.float64), axis=0).astype(np.float32)
    phase = (phase * np.float32(2.0)) * np.float32(np.pi) * np.float32(spf)
    sines = np.repeat(np.sin(phase), spf, axis=0) * np.float32(params.nsf_alpha)     # nearest upsampling
    uv = np.repeat((f0 > params.nsf_voiced_threshold).astype(np.float32), spf)[:, None]
    noise_amp = uv * np.float32(params.nsf_sigma) + (np.float32(1.0) - uv) * np.float32(params.nsf_alpha / 3)
    waves = sines * uv + noise_amp * noise.astype(np.float32, copy=False)
    merged = waves @ weight.astype(np.float32).T + bias.astype(np.float32)
    return np.tanh(merged[:, 0]).astype(np.float32)


class CausalHiftStream:
    """Upstream's streamed causal HiFT (``inference`` over the whole mel so far at every hop, the samples
    not sent yet sent), computing only what the new samples need: the F0 of the frames not done yet
    (from a window that reaches past the F0 layers' left context), the excitation over the whole
    sentence (cheap, and its phase is a running sum from the first frame), and the decoder over the
    frames from :data:`DECODER_MARGIN` before the first new sample. Every layer it windows is causal
    beyond its look-ahead, so the samples are the whole computation's."""

    def __init__(self, vocoder: "CausalHiftVocoder") -> None:
        self.vocoder = vocoder
        self._f0 = np.zeros(0, dtype=np.float32)   # final F0 of the frames done
        self.sent = 0                               # samples handed out

    def push(self, mel: np.ndarray, finalize: bool) -> np.ndarray:
        """The samples after :attr:`sent` of ``vocoder.streamed(mel, finalize)``, ``mel`` being every
        target frame so far (it only grows between calls)."""
        v, spf = self.vocoder, self.vocoder.params.samples_per_frame
        mel = np.asarray(mel, dtype=np.float32)
        total = mel.shape[1]
        kept = total if finalize else total - v.f0_lookahead
        n_out = kept * spf if finalize else (kept - v.look_right - 1) * spf
        if n_out <= self.sent:
            return np.zeros(0, dtype=np.float32)
        done = self._f0.shape[0]
        if kept > done:
            start = max(0, done - 2 * F0_LAYERS)    # the later F0 layers reach 2 frames back each
            f0 = v.f0(mel[:, start:])[done - start:kept - start]
            self._f0 = np.concatenate([self._f0, f0])
        source = causal_excitation(self._f0[:kept], v.noise(kept * spf), v.source_weight, v.source_bias, v.params)
        first = max(0, self.sent // spf - DECODER_MARGIN)
        audio = v.decode(mel[:, first:kept], source[first * spf:])
        out = audio[self.sent - first * spf:n_out - first * spf]
        self.sent = n_out
        return out


class CausalHiftVocoder(HiftVocoder):
    """mel -> waveform: numpy F0 and source, one ONNX decoder session (fakes welcome in tests); the
    decoding and its checks are CosyVoice2's (:class:`HiftVocoder`)."""

    def __init__(self, f0_predictor: CausalF0Predictor, decoder_session, source_weight: np.ndarray,
                 source_bias: np.ndarray, params: HiftParams, f0_lookahead: int = 3, look_right: int = 4) -> None:
        super().__init__(None, decoder_session, source_weight, source_bias, params)
        self.f0_predictor = f0_predictor
        self.noise_seed = NOISE_SEED         # the sine noise's draw (parity tests set upstream's)
        self.f0_lookahead = f0_lookahead    # frames the first F0 conv reads ahead
        self.look_right = look_right        # frames the decoder's first conv reads ahead

    def streamed(self, mel: np.ndarray, finalize: bool, noise: np.ndarray | None = None) -> np.ndarray:
        """Upstream ``CausalHiFTGenerator.inference(mel, finalize)``: with ``finalize`` the whole mel's
        audio; without, the audio that no later frame can change: the F0 predictor's last
        ``f0_lookahead`` frames and then the decoder's last ``look_right`` are read as context only,
        and one frame's samples more are left for the next call (the inverse STFT's edge). Every
        layer after the look-ahead ones is causal, so running our graphs on the frames kept and
        cutting the samples is the same arithmetic."""
        mel = np.asarray(mel, dtype=np.float32)
        if finalize:
            return self(mel, noise=noise)
        spf = self.params.samples_per_frame
        kept = mel.shape[1] - self.f0_lookahead
        n_out = (kept - self.look_right - 1) * spf
        if n_out <= 0:
            return np.zeros(0, dtype=np.float32)
        f0 = self.f0(mel)[:kept]
        noise = self.noise(kept * spf) if noise is None else np.asarray(noise, dtype=np.float32)[:kept * spf]
        source = causal_excitation(f0, noise, self.source_weight, self.source_bias, self.params)
        return self.decode(mel[:, :kept], source)[:n_out]

    def f0(self, mel: np.ndarray) -> np.ndarray:
        return self.f0_predictor(mel)

    def noise(self, n_samples: int) -> np.ndarray:
        """The sine noise for ``n_samples`` samples: uniform [0, 1), fixed seed, prefix-stable."""
        return np.random.default_rng(self.noise_seed).random((n_samples, self.params.nb_harmonics + 1),
                                                          dtype=np.float32)

    def source(self, mel: np.ndarray, noise: np.ndarray | None = None,
               rng: np.random.Generator | None = None) -> np.ndarray:
        """``rng`` is accepted for the CosyVoice2 vocoder's signature and not used (the noise is fixed)."""
        n = mel.shape[1] * self.params.samples_per_frame
        noise = self.noise(n) if noise is None else np.asarray(noise, dtype=np.float32)[:n]
        if noise.shape != (n, self.params.nb_harmonics + 1):
            raise ValueError(f"noise must cover {(n, self.params.nb_harmonics + 1)}, got {noise.shape}")
        return causal_excitation(self.f0(mel), noise, self.source_weight, self.source_bias, self.params)
