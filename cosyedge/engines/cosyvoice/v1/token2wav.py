"""CosyVoice-300M's speech tokens -> 22.05 kHz audio: the v1 flow, then HiFT with its ``SineGen`` source.

What v1 does differently from CosyVoice2 lives here, step for step as upstream @46dfe04
(``MaskedDiffWithXvec.inference``, ``InterpolateRegulator.inference``, ``SineGen``):

* the flow encoder is non-causal and gives one vector per token; the length regulator interpolates
  them to mel frames: the prompt's to the prompt mel's frame count, the target's to
  ``int(n / 50 * 22050 / 256)`` frames, a target of more than 40 tokens in three parts (first and last
  20 tokens to 34 frames each), then its convolutions (a graph);
* the CFM starts from fresh standard-normal noise each call (upstream ``randn_like``); the Euler
  solver with classifier-free guidance is CosyVoice2's (:meth:`FlowDecoder.solve`);
* at 22050 Hz the harmonic source is ``SineGen``: the phase is the running sum of ``f0 * k / sr`` over
  samples (accumulated in double, as torch does on the CPU), plus a random start phase per overtone;
  256 samples per mel frame. The STFT, decoder graph and inverse STFT are CosyVoice2's.

Streaming (:class:`Token2WavV1Stream`) follows upstream ``CosyVoiceModel.tts(stream=True)``: the flow
runs on each hop's tokens plus the overlap (with the prompt, non-causal as always), replays the
previous hop's noise and ``mu`` over the overlap (upstream's ``flow_cache``), cross-fades the mel
over the overlap, and HiFT continues from its mel/source cache with a speech cross-fade
(:class:`~cosyedge.engines.cosyvoice.common.hift.HiftStream`).

The ``quality`` levers that mean something here (:mod:`~cosyedge.engines.cosyvoice.common.quality`):
``n_timesteps`` and ``cfg_steps`` reach the CFM (whole and streamed), and ``first_hop_tokens`` makes
the stream's first hop shorter than upstream's 100 tokens (the later hops keep upstream's schedule).
The flow is not chunk-causal, so there is no left context to bound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from cosyedge.engines.cosyvoice.common.flow import FlowDecoder, FlowParams, resample_mel
from cosyedge.engines.cosyvoice.common.hift import HiftParams, HiftStream, HiftVocoder, _nearest_index
from cosyedge.engines.cosyvoice.common.manifest import ModelDir
from cosyedge.engines.cosyvoice.common.quality import first_hop_at
from cosyedge.engines.cosyvoice.common.token2wav import check_speed, load_vocoder
from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)

#: Upstream hard-codes 22050 Hz and 256 samples per frame in the flow's length computation.
MEL_RATE = 22050 / 256
EDGE_TOKENS = 20
MAX_FRAMES = 30000
#: ``CosyVoiceModel``'s stream settings at 46dfe04 (token rate 50): hops of 100 tokens growing by
#: ``STREAM_SCALE`` up to 200, 20 overlap tokens = 34 mel frames (mel cross-fade, and the frames of
#: noise and ``mu`` the CFM replays, hard-coded 34 upstream), HiFT's cache of 20 mel frames.
TOKEN_OVERLAP = 20
MEL_OVERLAP = 34
HIFT_CACHE_FRAMES = 20
STREAM_SCALE = 1.0


def target_frames(n_tokens: int, token_rate: int = 50) -> int:
    """Mel frames for ``n_tokens`` target tokens: ``int(n / rate * 22050 / 256)``, as upstream computes it."""
    return int(n_tokens / token_rate * 22050 / 256)


def shortest_first_hop(token_rate: int = 50) -> int:
    """The fewest tokens a first hop may have and still yield audio: its mel (with the overlap's
    tokens) must outlast the frames faded into the next hop and those HiFT holds back."""
    tokens = 1
    while target_frames(tokens + TOKEN_OVERLAP, token_rate) <= MEL_OVERLAP + HIFT_CACHE_FRAMES:
        tokens += 1
    return tokens


def linear_resize(x: np.ndarray, size: int) -> np.ndarray:
    """``F.interpolate(x[None], size=size, mode='linear')`` (align_corners False) of x [C, N] -> [C, size]."""
    n_in = x.shape[1]
    scale = np.float32(n_in / size)
    src = np.maximum(scale * (np.arange(size, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = src.astype(np.int64)
    lam = src - i0.astype(np.float32)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return ((np.float32(1.0) - lam) * x[:, i0] + lam * x[:, i1]).astype(np.float32)


def regulate(h_prompt: np.ndarray, h_target: np.ndarray, prompt_frames: int, frames: int,
             token_rate: int = 50) -> np.ndarray:
    """The length regulator's interpolation: per-token h [C, P] and [C, N] -> [C, prompt_frames + frames]."""
    n = h_target.shape[1]
    if n > 2 * EDGE_TOKENS:
        edge = target_frames(EDGE_TOKENS, token_rate)
        target = np.concatenate([linear_resize(h_target[:, :EDGE_TOKENS], edge),
                                 linear_resize(h_target[:, EDGE_TOKENS:-EDGE_TOKENS], frames - 2 * edge),
                                 linear_resize(h_target[:, -EDGE_TOKENS:], edge)], axis=1)
    else:
        target = linear_resize(h_target, frames)
    if h_prompt.shape[1] == 0:
        return target
    return np.concatenate([linear_resize(h_prompt, prompt_frames), target], axis=1)


class FlowV1:
    """Encoder, regulator and estimator sessions of the v1 flow; built from ready sessions."""

    def __init__(self, encoder_session, regulator_session, estimator_session, params: FlowParams,
                 token_rate: int = 50) -> None:
        self.encoder_session = encoder_session
        self.regulator_session = regulator_session
        self.cfm = FlowDecoder(None, estimator_session, np.zeros((params.mel_bins, 0), np.float32), params)
        self.params = params
        self.token_rate = token_rate

    def mu(self, tokens: np.ndarray, prompt_tokens: np.ndarray, prompt_frames: int,
           embedding: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu [80, prompt_frames + target frames], spks [80]) for the tokens after the prompt's."""
        all_tokens = np.concatenate([prompt_tokens, tokens]).astype(np.int64)[None]
        h, spks = self.encoder_session.run(None, {"tokens": all_tokens,
                                                  "embedding": embedding.reshape(1, -1).astype(np.float32)})
        h = h[0].T
        frames = target_frames(tokens.shape[0], self.token_rate)
        if frames < 1:
            raise ParameterError("too few speech tokens for one mel frame")
        x = regulate(h[:, :prompt_tokens.shape[0]], h[:, prompt_tokens.shape[0]:], prompt_frames, frames,
                     self.token_rate)
        return self.regulator_session.run(None, {"x": x[None]})[0][0], spks[0]

    def __call__(self, tokens, prompt_tokens, prompt_mel, embedding, noise: np.ndarray | None = None,
                 rng: np.random.Generator | None = None, n_timesteps: int | None = None,
                 cfg_steps: int | None = None) -> np.ndarray:
        """Target tokens [N] (+ prompt tokens [P], prompt mel [F, 80]) -> mel [80, int(N/50*22050/256)].

        ``noise`` [80, F + frames] is the CFM's start (default: drawn from ``rng``); ``n_timesteps``
        (None: the model's) and ``cfg_steps`` (guidance on the first that many steps; None: every
        step) as :meth:`FlowDecoder.solve` takes them."""
        return self.hop(tokens, prompt_tokens, prompt_mel, embedding, None, noise, rng, n_timesteps, cfg_steps)[0]

    def hop(self, tokens, prompt_tokens, prompt_mel, embedding, cache: tuple[np.ndarray, np.ndarray] | None,
            noise: np.ndarray | None = None, rng: np.random.Generator | None = None,
            n_timesteps: int | None = None, cfg_steps: int | None = None
            ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """:meth:`__call__` for one streamed hop: ``cache`` (noise, mu) [80, n] from the previous hop
        replaces the first n frames of both (the prompt's and the overlap's), as upstream's
        ``flow_cache``; returns the mel and this hop's cache (its prompt frames and last 34)."""
        p = self.params
        tokens = _tokens(tokens, p.vocab_size, allow_empty=False)
        prompt_tokens = _tokens(prompt_tokens, p.vocab_size, allow_empty=True)
        prompt_mel = np.asarray(prompt_mel if prompt_mel is not None else np.zeros((0, p.mel_bins)), np.float32)
        if prompt_mel.size == 0:
            prompt_mel = np.zeros((0, p.mel_bins), dtype=np.float32)
        if prompt_mel.ndim != 2 or prompt_mel.shape[1] != p.mel_bins or not np.all(np.isfinite(prompt_mel)):
            raise ParameterError(f"prompt_mel must be finite [frames, {p.mel_bins}], got shape {prompt_mel.shape}")
        if prompt_tokens.size == 0:
            prompt_mel = prompt_mel[:0]
        embedding = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if embedding.shape[0] != p.spk_embed_dim or not np.all(np.isfinite(embedding)):
            raise ParameterError(f"speaker_embedding must be {p.spk_embed_dim} finite numbers")
        steps = p.n_timesteps if n_timesteps is None else int(n_timesteps)
        mu, spks = self.mu(tokens, prompt_tokens, prompt_mel.shape[0], embedding)
        if mu.shape[1] > MAX_FRAMES:
            raise ParameterError(f"prompt + text need {mu.shape[1]} mel frames; the limit is {MAX_FRAMES}")
        cond = np.zeros_like(mu)
        cond[:, :prompt_mel.shape[0]] = prompt_mel.T
        if noise is None:
            rng = rng if rng is not None else np.random.default_rng()
            noise = rng.standard_normal(mu.shape, dtype=np.float32)
        elif noise.shape != mu.shape:
            raise ValueError(f"noise must have shape {mu.shape}, got {noise.shape}")
        frames = prompt_mel.shape[0]
        if cache is not None:
            noise, n = noise.copy(), cache[0].shape[1]
            noise[:, :n], mu[:, :n] = cache
        kept = (np.concatenate([noise[:, :frames], noise[:, -MEL_OVERLAP:]], axis=1),
                np.concatenate([mu[:, :frames], mu[:, -MEL_OVERLAP:]], axis=1))
        mel = self.cfm.solve(mu, spks, cond, steps, noise=noise, cfg_steps=cfg_steps)
        return mel[:, frames:], kept


def _tokens(values, vocab: int, allow_empty: bool) -> np.ndarray:
    arr = np.asarray(values if values is not None else [], dtype=np.int64).reshape(-1)
    if arr.size == 0 and not allow_empty:
        raise ParameterError("tokens is empty")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        raise ParameterError(f"tokens must be speech tokens in [0, {vocab})")
    return arr


def sinegen_source(f0: np.ndarray, noise: np.ndarray, phases: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                   params: HiftParams) -> np.ndarray:
    """``SourceModuleHnNSF`` at 22050 Hz: F0 frames [T] -> excitation [T * samples_per_frame].

    ``noise`` [H+1, L] standard normal, ``phases`` [H+1] in [-pi, pi) (the fundamental's is ignored:
    upstream zeroes it); ``weight`` [1, H+1] and ``bias`` [1] are ``m_source.l_linear``.
    """
    f0 = np.asarray(f0, dtype=np.float32).reshape(-1)
    f0_samples = f0[_nearest_index(f0.shape[0], params.samples_per_frame)]                 # [L]
    harmonics = np.arange(1, params.nb_harmonics + 2, dtype=np.float32)[:, None]
    rad = (f0_samples[None, :] * harmonics) / np.float32(params.sampling_rate)              # [H+1, L]
    running = np.cumsum(rad.astype(np.float64), axis=1).astype(np.float32)
    theta = np.float32(2 * np.pi) * np.mod(running, np.float32(1.0))
    start = np.asarray(phases, dtype=np.float32).reshape(-1, 1).copy()
    start[0] = 0.0
    sines = np.float32(params.nsf_alpha) * np.sin(theta + start)
    uv = (f0_samples > params.nsf_voiced_threshold).astype(np.float32)[None, :]
    noise_amp = uv * np.float32(params.nsf_sigma) + (np.float32(1.0) - uv) * np.float32(params.nsf_alpha / 3)
    waves = sines * uv + noise_amp * np.asarray(noise, dtype=np.float32)
    merged = weight.astype(np.float32) @ waves + bias.astype(np.float32)[:, None]
    return np.tanh(merged[0]).astype(np.float32)


class SineGenVocoder(HiftVocoder):
    """HiFT with upstream's 22.05 kHz ``SineGen`` source; the rest is CosyVoice2's vocoder."""

    def source(self, mel: np.ndarray, noise: np.ndarray | None = None, rng: np.random.Generator | None = None,
               phases: np.ndarray | None = None) -> np.ndarray:
        """Excitation [T * 256] for ``mel``; ``noise`` [9, T*256] and ``phases`` [9] override the draws."""
        n, k = mel.shape[1] * self.params.samples_per_frame, self.params.nb_harmonics + 1
        rng = rng if rng is not None else np.random.default_rng()
        if phases is None:
            phases = rng.uniform(-np.pi, np.pi, size=k).astype(np.float32)
        if noise is None:
            noise = rng.standard_normal((k, n), dtype=np.float32)
        elif noise.shape != (k, n):
            raise ValueError(f"noise must have shape {(k, n)}, got {noise.shape}")
        return sinegen_source(self.f0(mel), noise, phases, self.source_weight, self.source_bias, self.params)


@dataclass
class Token2WavV1:
    """The v1 flow and the 22.05 kHz vocoder of one model directory."""

    flow: FlowV1
    vocoder: SineGenVocoder

    @classmethod
    def load(cls, model: ModelDir, threads: int = 0) -> "Token2WavV1":
        fc = model.config("flow")
        params = FlowParams.from_dict(fc)
        flow = FlowV1(model.session(fc["encoder"], threads), model.session(fc["regulator"], threads),
                      model.session(fc["estimator"], threads), params,
                      token_rate=int(fc.get("input_frame_rate", 50)))
        return cls(flow, load_vocoder(model, threads, SineGenVocoder))

    @property
    def sample_rate(self) -> int:
        return self.vocoder.params.sampling_rate

    def __call__(self, tokens, prompt_tokens, prompt_mel, speaker_embedding, speed: float = 1.0,
                 rng: np.random.Generator | None = None, n_timesteps: int | None = None,
                 cfg_steps: int | None = None) -> np.ndarray:
        """float32 audio at 22.05 kHz (256 samples per mel frame), within +-0.99; ``n_timesteps`` and
        ``cfg_steps``: the quality levers (the defaults are upstream's)."""
        speed = check_speed(speed)
        rng = rng if rng is not None else np.random.default_rng()
        mel = self.flow(tokens, prompt_tokens, prompt_mel, speaker_embedding, rng=rng, n_timesteps=n_timesteps,
                        cfg_steps=cfg_steps)
        if speed != 1.0:
            mel = resample_mel(mel, speed)
        return self.vocoder(mel, rng=rng)

    #: Every converted v1 model streams: the hops run the same graphs as a whole sentence.
    can_stream = True

    def stream(self, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps: int | None = None,
               rng: np.random.Generator | None = None, *, cfg_steps: int | None = None,
               first_hop_tokens: int = 0) -> "Token2WavV1Stream":
        """One sentence hop by hop (:class:`Token2WavV1Stream`), at speed 1 as upstream streams;
        ``first_hop_tokens`` (0: upstream's) in this model's tokens (:meth:`first_hop`)."""
        return Token2WavV1Stream(self, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps,
                                 rng if rng is not None else np.random.default_rng(), cfg_steps=cfg_steps,
                                 first_hop_tokens=first_hop_tokens)

    def first_hop(self, mode_tokens: int) -> int:
        """A quality mode's first hop (``mode_tokens`` at the modes' 25 tokens a second) in this
        model's tokens: the same length of audio, at least :func:`shortest_first_hop` so that the
        hop yields audio past what it holds back; 0 (upstream's hop) when it would not be shorter."""
        if not mode_tokens:
            return 0
        tokens = max(first_hop_at(mode_tokens, self.flow.token_rate), shortest_first_hop(self.flow.token_rate))
        return tokens if tokens < 2 * self.flow.token_rate else 0


class Token2WavV1Stream:
    """Upstream's v1 hop schedule (``CosyVoiceModel.tts(stream=True)`` and ``token2wav`` at 46dfe04).

    ``push(tokens)`` collects target tokens; once ``hop + TOKEN_OVERLAP`` are waiting, the first
    ``hop + TOKEN_OVERLAP`` go through the flow (with the prompt and the previous hop's flow cache),
    the mel is faded in over the previous hop's last ``MEL_OVERLAP`` frames, those frames of this hop
    are held back, the rest is vocoded through the HiFT cache, and ``hop`` tokens are dropped (the
    overlap stays for the next hop). ``hop`` starts at 2 s of tokens and grows by ``STREAM_SCALE`` to
    4 s; a quality mode's shorter first hop (``first_hop_tokens``) takes the first one's place.
    :meth:`finish` runs the tokens left (``finalize``) and flushes HiFT's held-back tail.
    """

    def __init__(self, token2wav: Token2WavV1, prompt_tokens, prompt_mel, embedding, n_timesteps: int | None,
                 rng: np.random.Generator, cfg_steps: int | None = None, first_hop_tokens: int = 0) -> None:
        self.flow = token2wav.flow
        self.prompt = (prompt_tokens, prompt_mel, embedding)
        self.n_timesteps, self.cfg_steps, self.rng = n_timesteps, cfg_steps, rng
        rate = token2wav.flow.token_rate
        # upstream's schedule; a shorter first hop (the quality lever) takes the place of its first
        self._upstream_hop, self.max_hop_tokens = 2 * rate, 4 * rate
        self.hop_tokens = first_hop_tokens or self._upstream_hop
        self.vocoder = HiftStream(token2wav.vocoder, mel_cache_frames=HIFT_CACHE_FRAMES, rng=rng)
        self.window = np.hamming(2 * MEL_OVERLAP)
        self._tokens: list[int] = []
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        self._overlap: np.ndarray | None = None  # the last hop's held-back mel frames
        self.hops = 0

    def push(self, tokens) -> list[np.ndarray]:
        """Add target tokens; returns the audio of every hop now complete (often none)."""
        self._tokens.extend(int(t) for t in np.asarray(tokens if tokens is not None else [], np.int64).reshape(-1))
        out = []
        while len(self._tokens) >= self.hop_tokens + TOKEN_OVERLAP:
            out.append(self._render(self._tokens[:self.hop_tokens + TOKEN_OVERLAP], final=False))
            del self._tokens[:self.hop_tokens]
            self._upstream_hop = min(self.max_hop_tokens, int(self._upstream_hop * STREAM_SCALE))
            self.hop_tokens = self._upstream_hop
        return out

    def finish(self) -> np.ndarray:
        """The audio of the tokens left and of the vocoder's held-back tail."""
        if not self._tokens:
            return self.vocoder.push(np.zeros((self.flow.params.mel_bins, 0), np.float32), final=True)
        return self._render(self._tokens, final=True)

    def _render(self, tokens: list[int], final: bool) -> np.ndarray:
        prompt_tokens, prompt_mel, embedding = self.prompt
        mel, self._cache = self.flow.hop(np.asarray(tokens, np.int64), prompt_tokens, prompt_mel, embedding,
                                         self._cache, rng=self.rng, n_timesteps=self.n_timesteps,
                                         cfg_steps=self.cfg_steps)
        if self._overlap is not None:
            w = self.window
            mel[:, :MEL_OVERLAP] = (mel[:, :MEL_OVERLAP] * w[:MEL_OVERLAP] + self._overlap * w[MEL_OVERLAP:]).astype(np.float32)
        if not final:
            self._overlap, mel = mel[:, -MEL_OVERLAP:], mel[:, :-MEL_OVERLAP]
        self.hops += 1
        return self.vocoder.push(mel, final=final)
