"""Flow matching at run time: speech tokens -> 80-bin mel, with onnxruntime + numpy only.

Upstream semantics (``CausalMaskedDiffWithXvec.inference``, non-streaming):

* prompt tokens and target tokens are encoded together; ``mu`` has 2 frames per token;
* the condition holds the prompt mel in its first frames and zeros after;
* the ODE starts from upstream's fixed noise (the converter saves it), and runs Euler steps on the cosine
  schedule ``t = 1 - cos(pi/2 * k/n)``; each step is one batch-2 estimator call (row 0 conditioned,
  row 1 with mu/spks/cond zeroed), mixed as ``(1 + r) v_cond - r v_uncond`` with r = 0.7;
* nothing is padded, so upstream's estimator mask is all ones; our converter's estimator graph has no
  mask input (graphs from older converters do, and get the ones);
* the prompt frames are cut off the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowParams:
    """Flow constants written by the converter into the manifest."""

    token_mel_ratio: int = 2
    vocab_size: int = 6561
    spk_embed_dim: int = 192
    mel_bins: int = 80
    n_timesteps: int = 10
    inference_cfg_rate: float = 0.7

    @classmethod
    def from_dict(cls, values: dict) -> "FlowParams":
        return cls(**{k: values[k] for k in cls.__dataclass_fields__ if k in values})


def cosine_schedule(n_timesteps: int) -> np.ndarray:
    """``1 - cos(linspace(0, 1, n+1) * pi/2)`` in float32, as upstream."""
    t = np.linspace(0.0, 1.0, n_timesteps + 1, dtype=np.float32)
    return (np.float32(1.0) - np.cos(t * np.float32(0.5) * np.float32(np.pi))).astype(np.float32)


class FlowDecoder:
    """Encoder-front and estimator sessions plus the fixed noise; built from ready objects."""

    def __init__(self, encoder_session, estimator_session, noise: np.ndarray, params: FlowParams) -> None:
        self.encoder_session = encoder_session
        self.estimator_session = estimator_session
        self.noise = np.asarray(noise, dtype=np.float32)    # [80, max_frames]
        self.params = params
        self._mask_input = "mask" in {i.name for i in estimator_session.get_inputs()}

    @property
    def max_frames(self) -> int:
        return int(self.noise.shape[1])

    def encode(self, tokens: np.ndarray, embedding: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All tokens (prompt first) [N] + speaker embedding [192] -> mu [80, 2N], spks [80]."""
        mu, spks = self.encoder_session.run(None, {
            "tokens": np.asarray(tokens, dtype=np.int64)[None],
            "embedding": np.asarray(embedding, dtype=np.float32).reshape(1, -1)})
        return mu[0], spks[0]

    def estimate(self, x: np.ndarray, mu: np.ndarray, t: np.ndarray, spks: np.ndarray,
                 cond: np.ndarray) -> np.ndarray:
        """One estimator call on unpadded input (batch-first arrays, upstream's names; mask = 1)."""
        feeds = {"x": x, "mu": mu, "t": t, "spks": spks, "cond": cond}
        if self._mask_input:
            feeds["mask"] = np.ones((x.shape[0], 1, x.shape[2]), dtype=np.float32)
        return self.estimator_session.run(None, feeds)[0]

    def solve(self, mu: np.ndarray, spks: np.ndarray, cond: np.ndarray, n_timesteps: int,
              cfg_rate: float | None = None, noise: np.ndarray | None = None) -> np.ndarray:
        """Euler CFM from the fixed noise: mu/cond [80, T], spks [80] -> mel [80, T].

        ``noise`` [80, T] starts from there instead (CosyVoice-300M draws fresh noise per call)."""
        n_frames = mu.shape[1]
        rate = np.float32(self.params.inference_cfg_rate if cfg_rate is None else cfg_rate)
        x = (self.noise[:, :n_frames] if noise is None else np.asarray(noise, dtype=np.float32)).copy()
        mu_in = np.zeros((2, mu.shape[0], n_frames), dtype=np.float32)
        mu_in[0] = mu
        spks_in = np.zeros((2, spks.shape[0]), dtype=np.float32)
        spks_in[0] = spks
        cond_in = np.zeros((2, cond.shape[0], n_frames), dtype=np.float32)
        cond_in[0] = cond
        t_span = cosine_schedule(n_timesteps)
        t, dt = t_span[0], t_span[1] - t_span[0]
        for step in range(1, n_timesteps + 1):
            x_in = np.stack([x, x])
            v = self.estimate(x_in, mu_in, np.full(2, t, dtype=np.float32), spks_in, cond_in)
            x = x + dt * ((np.float32(1.0) + rate) * v[0] - rate * v[1])
            t = np.float32(t + dt)
            if step < n_timesteps:
                dt = t_span[step + 1] - t
        return x.astype(np.float32)

    def __call__(self, tokens: np.ndarray, prompt_tokens: np.ndarray, prompt_mel: np.ndarray,
                 embedding: np.ndarray, n_timesteps: int | None = None) -> np.ndarray:
        """Target tokens [N] (+ prompt tokens [P], prompt mel [2P, 80]) -> mel [80, 2N]."""
        p = self.params
        tokens = _tokens(tokens, "tokens", p.vocab_size, allow_empty=False)
        prompt_tokens = _tokens(prompt_tokens, "prompt_tokens", p.vocab_size, allow_empty=True)
        prompt_mel = np.asarray(prompt_mel if prompt_mel is not None else np.zeros((0, p.mel_bins)),
                                dtype=np.float32)
        if prompt_mel.size == 0:
            prompt_mel = np.zeros((0, p.mel_bins), dtype=np.float32)
        if prompt_mel.ndim != 2 or prompt_mel.shape[1] != p.mel_bins or not np.all(np.isfinite(prompt_mel)):
            raise ParameterError(f"prompt_mel must be finite [frames, {p.mel_bins}], got shape {prompt_mel.shape}")
        embedding = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if embedding.shape[0] != p.spk_embed_dim or not np.all(np.isfinite(embedding)):
            raise ParameterError(f"speaker_embedding must be {p.spk_embed_dim} finite numbers")
        steps = p.n_timesteps if n_timesteps is None else int(n_timesteps)
        if not 1 <= steps <= 100:
            raise ParameterError(f"n_timesteps must be 1-100, got {steps}")
        # Upstream's frontend keeps exactly token_mel_ratio mel frames per prompt token.
        n_prompt = min(prompt_tokens.shape[0], prompt_mel.shape[0] // p.token_mel_ratio)
        prompt_tokens, prompt_mel = prompt_tokens[:n_prompt], prompt_mel[:n_prompt * p.token_mel_ratio]
        total = (n_prompt + tokens.shape[0]) * p.token_mel_ratio
        if total > self.max_frames:
            raise ParameterError(f"prompt + text need {total} mel frames; the model allows {self.max_frames}")
        mu, spks = self.encode(np.concatenate([prompt_tokens, tokens]), embedding)
        cond = np.zeros_like(mu)
        cond[:, :prompt_mel.shape[0]] = prompt_mel.T
        mel = self.solve(mu, spks, cond, steps)
        return mel[:, prompt_mel.shape[0]:]


def _tokens(values, name: str, vocab: int, allow_empty: bool) -> np.ndarray:
    arr = np.asarray(values if values is not None else [], dtype=np.int64).reshape(-1)
    if arr.size == 0 and not allow_empty:
        raise ParameterError(f"{name} is empty")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        raise ParameterError(f"{name} must be speech tokens in [0, {vocab})")
    return arr


def resample_mel(mel: np.ndarray, speed: float) -> np.ndarray:
    """Speed change by linear interpolation of mel frames to ``int(T / speed)`` (upstream's semantics)."""
    n_in = mel.shape[1]
    n_out = int(n_in / speed)
    if n_out < 1:
        raise ParameterError(f"speed {speed} leaves no audio")
    scale = np.float32(n_in / n_out)
    dst = np.arange(n_out, dtype=np.float32)
    src = np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0.0))
    i0 = src.astype(np.int64)
    lam1 = src - i0.astype(np.float32)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return ((np.float32(1.0) - lam1) * mel[:, i0] + lam1 * mel[:, i1]).astype(np.float32)
