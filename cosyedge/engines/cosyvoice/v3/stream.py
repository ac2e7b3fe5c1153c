"""CosyVoice3 streamed hop by hop, as upstream's ``CosyVoice3Model.tts(stream=True)`` at ace7c47.

Upstream's semantics, step for step:

* Hop schedule: the first hop is 25 target tokens plus the padding that ends the prompt's last 25-token
  chunk; each later hop doubles up to 100 (25 + pad, 50, 100, 100, ...). A hop is rendered once its
  tokens and the 3 look-ahead tokens after it are there; the rest goes in one final call.
* Flow (``CausalMaskedDiffWithDiT.inference(streaming=True)``): the pre-lookahead layer reads the 3
  look-ahead tokens as real right context (``finalize=False``; zeros at the end with ``finalize=True``);
  the DiT runs over every frame so far, prompt first, with chunk-causal attention (frame i sees the
  frames before the end of its 50-frame chunk), and the hop's mel is the result from the hop's first
  frame. Every hop ends on a chunk end, so the frames of earlier hops would come out as before:
  upstream recomputes them; here each chunk is computed once, by the converter's DiT chunk-step graph
  from per-step caches of the chunks before it (:class:`DiTChunks`), which is the same arithmetic.
* Vocoder (``CausalHiFTGenerator.inference``): upstream vocodes the whole target mel so far at each
  hop and sends the samples not sent yet. With ``finalize=False`` the F0 predictor reads its last 3
  frames as context only and the decoder its last 4 more, and the last frame's samples are held back
  (:meth:`~cosyedge.engines.cosyvoice.v3.causal_hift.CausalHiftVocoder.streamed`); the stream gives the
  same samples from a window of the frames they depend on
  (:class:`~cosyedge.engines.cosyvoice.v3.causal_hift.CausalHiftStream`).

One deliberate difference, shared with the CosyVoice2 stream: upstream's glue makes the last call with
``streaming=False`` (full attention over the whole sentence); here it is the chunk-causal
``streaming=True, finalize=True`` call, which needs no whole-sentence recomputation.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cosyedge.engines.cosyvoice.common.flow import (FlowDecoder, PromptStates, cfg_rows, check_tokens,
                                                    cosine_schedule)
from cosyedge.engines.cosyvoice.common.flow_cache import BlockedStepCache
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from cosyedge.engines.cosyvoice.v3.causal_hift import CausalHiftStream
from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkLayout:
    """The DiT chunk-step graph's cache sizes (the manifest's ``flow.stream``)."""

    chunk_frames: int = 50
    attention_layers: int = 22
    heads: int = 16
    head_dim: int = 64
    conv_layers: int = 2
    conv_tail: int = 30
    conv_channels: int = 1024
    kv_dtype: str = "float32"

    @classmethod
    def from_dict(cls, values: dict) -> "ChunkLayout":
        return cls(**{k: (str(values[k]) if k == "kv_dtype" else int(values[k]))
                      for k in cls.__dataclass_fields__ if k in values})

    def cache_bytes_per_frame(self, n_timesteps: int, cfg_steps: int | None = None) -> int:
        """Key/value bytes one mel frame adds over the Euler steps (what a streamed sentence grows by)."""
        rows = sum(cfg_rows(step, cfg_steps) for step in range(n_timesteps))
        return self.attention_layers * 2 * self.heads * self.head_dim * np.dtype(self.kv_dtype).itemsize * rows


@dataclass
class PromptChunks:
    """A voice's caches after its text-independent prompt chunks (``frames`` frames), per Euler step."""

    frames: int
    kv: list
    conv: list

    @property
    def nbytes(self) -> int:
        return sum(kv.nbytes for kv in self.kv) + sum(c.nbytes for c in self.conv)


class DiTChunks:
    """The streamed DiT computed once per 50-frame chunk, from caches of the chunks before it: per
    Euler step the attention layers' keys/values (a
    :class:`~cosyedge.engines.cosyvoice.common.flow_cache.BlockedStepCache`) and the position
    convolutions' last inputs. Chunks are counted from the first prompt frame, as upstream's mask
    counts them; a partial chunk (the sentence's end) is computed and not kept."""

    def __init__(self, decoder: FlowDecoder, session, layout: ChunkLayout, n_timesteps: int,
                 cfg_steps: int | None) -> None:
        self.decoder, self.session, self.layout = decoder, session, layout
        self.n_timesteps, self.cfg_steps = n_timesteps, cfg_steps
        rows = [cfg_rows(step, cfg_steps) for step in range(n_timesteps)]
        self._kv = [BlockedStepCache(layout.attention_layers, layout.heads, layout.head_dim, layout.chunk_frames,
                                     layout.kv_dtype, batch=r) for r in rows]
        self._conv = [np.zeros((layout.conv_layers, r, layout.conv_tail, layout.conv_channels), dtype=np.float32)
                      for r in rows]
        self.frames_done = 0                # frames of whole chunks computed (kept in the caches)

    def snapshot(self) -> PromptChunks:
        """A copy of the caches as they are now (whole chunks only)."""
        return PromptChunks(self.frames_done, [kv.compact(self.frames_done, 0) for kv in self._kv],
                            [c.copy() for c in self._conv])

    def restore(self, state: PromptChunks) -> None:
        """Continue from ``state`` (copied: the state stays as it is for the next sentence)."""
        self._kv = [kv.compact(state.frames, self.layout.chunk_frames) for kv in state.kv]
        self._conv = [c.copy() for c in state.conv]
        self.frames_done = state.frames

    @property
    def cache_bytes(self) -> int:
        return sum(kv.nbytes for kv in self._kv) + sum(c.nbytes for c in self._conv)

    def reserve(self, frames: int) -> None:
        for kv in self._kv:
            kv.reserve(frames)

    def run(self, mu: np.ndarray, spks: np.ndarray, cond: np.ndarray,
            on_chunk: Callable[[], None] | None = None) -> np.ndarray:
        """mu/cond [80, T] of every frame so far (T past :attr:`frames_done`) -> the mel [80, T -
        frames_done] of the frames not computed yet, chunk by chunk; ``on_chunk`` after each whole one."""
        out, total, chunk = [], mu.shape[1], self.layout.chunk_frames
        while self.frames_done < total:
            start = self.frames_done
            end = min(start + chunk, total)
            out.append(self._chunk(mu[:, start:end], spks, cond[:, start:end], start, keep=end - start == chunk))
            if end - start < chunk:
                break
            self.frames_done = end
            if on_chunk is not None:
                on_chunk()
        return np.concatenate(out, axis=1) if out else np.zeros((mu.shape[0], 0), dtype=np.float32)

    def close(self) -> None:
        self._kv, self._conv = [], []

    def _chunk(self, mu: np.ndarray, spks: np.ndarray, cond: np.ndarray, start: int, keep: bool) -> np.ndarray:
        frames = mu.shape[1]
        mu_in = np.zeros((2, *mu.shape), dtype=np.float32)
        mu_in[0] = mu
        spks_in = np.zeros((2, spks.shape[0]), dtype=np.float32)
        spks_in[0] = spks
        cond_in = np.zeros_like(mu_in)
        cond_in[0] = cond
        x = self.decoder.noise[:, start:start + frames].copy()
        rate = np.float32(self.decoder.params.inference_cfg_rate)
        offset = np.asarray([start], dtype=np.int64)
        t_span = cosine_schedule(self.n_timesteps)
        t, dt = t_span[0], t_span[1] - t_span[0]
        for step in range(self.n_timesteps):
            rows = cfg_rows(step, self.cfg_steps)
            v, *shares, conv = self.session.run(None, {
                "x": np.stack([x] * rows), "mu": mu_in[:rows], "t": np.full(rows, t, dtype=np.float32),
                "spks": spks_in[:rows], "cond": cond_in[:rows], "offset": offset, "conv": self._conv[step],
                **self._kv[step].feeds()})
            if keep:
                self._conv[step] = conv
                self._kv[step].append(shares)
            x = x + dt * ((np.float32(1.0) + rate) * v[0] - rate * v[1] if rows == 2 else v[0])
            t = np.float32(t + dt)
            if step + 1 < self.n_timesteps:
                dt = t_span[step + 2] - t
        return x.astype(np.float32)


@dataclass(frozen=True)
class HopSchedule:
    """Upstream's hop lengths in target tokens (the manifest's ``flow.stream``). Upstream keeps the
    grown hop on its model object (its later requests start at 100); each sentence here starts at 25,
    as upstream's first request does."""

    hop_tokens: int = 25
    max_hop_tokens: int = 100
    scale: int = 2

    @classmethod
    def from_dict(cls, values: dict) -> "HopSchedule":
        return cls(int(values.get("hop_tokens", 25)), int(values.get("max_hop_tokens", 100)),
                   int(values.get("hop_scale", 2)))

    def hop(self, index: int, n_prompt: int) -> int:
        """Target tokens of hop ``index`` (0-based): the first ends the prompt's last chunk too."""
        if index == 0:
            return self.hop_tokens + (-n_prompt % self.hop_tokens)
        return min(self.max_hop_tokens, self.hop_tokens * self.scale ** index)


class DiTStream:
    """One utterance streamed: :meth:`push` speech tokens as the LLM makes them and get the audio of
    every hop now complete; :meth:`finish` renders the rest. The interface of
    :class:`~cosyedge.engines.cosyvoice.common.token2wav.Token2WavStream` that
    :func:`~cosyedge.engines.cosyvoice.common.hops.stream_hops` and the engine read.

    The DiT's chunks are computed once (:class:`DiTChunks`), the causal HiFT's samples too
    (:class:`~cosyedge.engines.cosyvoice.v3.causal_hift.CausalHiftStream`); the pre-lookahead front is
    run again over every token at each hop (an embedding and two small convolutions).

    Memory: the DiT's caches grow by :meth:`ChunkLayout.cache_bytes_per_frame` per mel frame. With
    ``cache_budget`` (bytes, 0 = none), once the prompt and the tokens so far would pass it, the stream
    stops (:attr:`limited`), frees its caches and keeps the tokens; :meth:`finish` renders the whole
    sentence as the non-streamed path does and sends it from the first sample not sent yet.
    """

    def __init__(self, token2wav: "Token2WavV3", prompt_tokens: np.ndarray, prompt_mel: np.ndarray,
                 embedding: np.ndarray, n_timesteps: int, cfg_steps: int | None = None,
                 cache_budget: int = 0) -> None:
        self.token2wav = token2wav
        self.flow, self.vocoder, self.schedule = token2wav.flow, token2wav.vocoder, token2wav.schedule
        self.ratio = self.flow.params.token_mel_ratio
        self.lookahead = self.flow.params.pre_lookahead_len
        self.prompt_tokens, self.prompt_mel, self.embedding = prompt_tokens, prompt_mel, embedding
        self.n_timesteps, self.cfg_steps = n_timesteps, cfg_steps
        self.cache_budget = cache_budget
        self.limited = False                  # past the budget: the rest is rendered whole
        self.chunks = DiTChunks(self.flow, token2wav.step_graph(), token2wav.layout, n_timesteps, cfg_steps)
        # The prompt's chunks whose look-ahead is still prompt do not depend on the text: their state is
        # kept for the voice's next sentence (as CosyVoice2's PromptStates).
        chunk_tokens = token2wav.layout.chunk_frames // self.ratio
        self._prompt_frames = max(0, (self.n_prompt - self.lookahead) // chunk_tokens) * token2wav.layout.chunk_frames
        self._prompt_key = PromptStates.key(prompt_tokens, prompt_mel, embedding, f"{n_timesteps}/{cfg_steps}")
        state = token2wav.prompt_states.take(self._prompt_key) if self._prompt_frames else None
        self.prompt_cached = state is not None
        if state is not None:
            self.chunks.restore(state)
            token2wav.prompt_states.put(self._prompt_key, state)
        self._tokens: list[int] = []
        self._offset = 0                  # target tokens rendered
        self._mel = np.zeros((self.flow.params.mel_bins, 0), dtype=np.float32)   # target mel so far
        self._hift = CausalHiftStream(self.vocoder)
        self._finished = False
        self.hops = 0

    @property
    def n_prompt(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def mel(self) -> np.ndarray:
        """The target mel [80, frames] of the hops rendered so far (what the vocoder reads)."""
        return self._mel

    @property
    def tokens_rendered(self) -> int:
        """Target tokens whose audio has been handed out (hop ends)."""
        return self._offset

    @property
    def cache_bytes(self) -> int:
        return self.chunks.cache_bytes

    def reserve(self, tokens: int) -> None:
        """Room in the caches for the prompt and ``tokens`` target tokens, made once."""
        self.chunks.reserve((self.n_prompt + max(0, int(tokens))) * self.ratio)

    def _next_hop(self) -> int:
        return self.schedule.hop(self.hops, self.n_prompt)

    def _over_budget(self, tokens: int) -> bool:
        frames = (self.n_prompt + tokens) * self.ratio
        per_frame = self.token2wav.layout.cache_bytes_per_frame(self.n_timesteps, self.cfg_steps)
        return bool(self.cache_budget) and frames * per_frame > self.cache_budget

    def push(self, tokens) -> list[np.ndarray]:
        """Add target tokens; returns the audio of every hop now complete (often none)."""
        if self._finished:
            raise ParameterError("this stream is finished")
        new = check_tokens(tokens, "tokens", self.flow.params.vocab_size, allow_empty=True)
        self._tokens.extend(int(t) for t in new)
        if not self.limited and self._over_budget(len(self._tokens)):
            logger.info("streamed DiT cache would pass %.0f MB after %d tokens: rendering the sentence whole",
                        self.cache_budget / 2 ** 20, len(self._tokens))
            self.limited = True
            self.chunks.close()
        out = []
        while not self.limited and len(self._tokens) - self._offset >= self._next_hop() + self.lookahead:
            out.append(self._render(self._offset + self._next_hop(), final=False))
        return out

    def finish(self) -> np.ndarray:
        """The audio of the remaining tokens (upstream's ``finalize=True`` call); the stream ends."""
        if self._finished:
            raise ParameterError("this stream is finished")
        try:
            if self.limited:
                return self._finish_whole()
            if len(self._tokens) == self._offset and self._mel.shape[1] == 0:
                return np.zeros(0, dtype=np.float32)
            return self._render(len(self._tokens), final=True)
        finally:
            self.close()

    def close(self) -> None:
        """End the stream (a cancel, an error, or after :meth:`finish`): its caches are freed now."""
        self._finished = True
        self.chunks.close()

    def _hop_mel(self, end: int, final: bool) -> np.ndarray:
        """The flow's mel [80, frames] of target tokens [offset, end): upstream's flow call on the prompt
        and the tokens so far (with the look-ahead after ``end`` unless ``final``), each chunk once."""
        flow, ratio = self.flow, self.ratio
        given = self._tokens[:end] if final else self._tokens[:end + self.lookahead]
        tokens = np.concatenate([self.prompt_tokens, np.asarray(given, dtype=np.int64)])
        frames = (self.n_prompt + end) * ratio
        if frames > flow.max_frames:
            raise ParameterError(f"prompt + text need {frames} mel frames; the model allows {flow.max_frames}")
        mu, spks = flow.encode(tokens, self.embedding)
        mu = np.ascontiguousarray(mu[:, :frames])     # the look-ahead tokens are context only
        cond = np.zeros_like(mu)
        cond[:, :self.prompt_mel.shape[0]] = self.prompt_mel.T
        start = self.chunks.frames_done
        mel = self.chunks.run(mu, spks, cond, self._keep_prompt_state)
        return mel[:, (self.n_prompt + self._offset) * ratio - start:]

    def _keep_prompt_state(self) -> None:
        if self.chunks.frames_done == self._prompt_frames and not self.prompt_cached:
            self.token2wav.prompt_states.put(self._prompt_key, self.chunks.snapshot())
            self.prompt_cached = True

    def _render(self, end: int, final: bool) -> np.ndarray:
        self._mel = np.concatenate([self._mel, self._hop_mel(end, final)], axis=1)
        audio = self._hift.push(self._mel, finalize=final)
        self._offset = end
        self.hops += 1
        return audio

    def _finish_whole(self) -> np.ndarray:
        """The whole sentence rendered as not streamed, from the first sample not sent yet."""
        self.hops += 1
        if not self._tokens:
            return np.zeros(0, dtype=np.float32)
        mel = self.flow(self._tokens, self.prompt_tokens, self.prompt_mel, self.embedding, self.n_timesteps,
                        cfg_steps=self.cfg_steps)
        return self.vocoder(mel)[self._hift.sent:]


@dataclass
class Token2WavV3(Token2Wav):
    """CosyVoice3's token2wav: the whole-sentence path of :class:`Token2Wav`, and, where the model was
    converted with the DiT chunk-step graph (``open_step``), :meth:`stream`.

    The step graph is a second copy of the DiT's weights (347 MB at full size, int8): it is opened by
    the first stream, so a box that never streams does not hold it."""

    open_step: Callable[[], object] | None = None
    step_session: object | None = None
    layout: ChunkLayout = ChunkLayout()
    schedule: HopSchedule = HopSchedule()
    _streams: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False)
    #: The last voice's text-independent prompt chunks (:class:`PromptChunks`), for its next sentence.
    prompt_states: PromptStates = field(default_factory=PromptStates, repr=False)
    _opening: threading.Lock = field(default_factory=threading.Lock, repr=False)

    #: The quality levers a v3 stream does not take: upstream's whole left context and first hop.
    can_bound_context = False
    can_shorten_first_hop = False

    @property
    def can_stream(self) -> bool:
        return self.open_step is not None or self.step_session is not None

    def step_graph(self):  # noqa: ANN201 - an onnxruntime session (or a stand-in)
        """The DiT chunk-step session, opened on first use and kept."""
        with self._opening:
            if self.step_session is None and self.open_step is not None:
                self.step_session = self.open_step()
        return self.step_session

    @property
    def stream_cache_bytes(self) -> int:
        """Bytes the caches of the streams still open hold now; 0 once each has finished or closed."""
        return sum(stream.cache_bytes for stream in list(self._streams))

    def stream(self, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps: int | None = None,
               rng: np.random.Generator | None = None, cache_budget: int = 0,
               expected_tokens: int = 0, *, cfg_steps: int | None = None, left_chunks: int = 0,
               first_hop_tokens: int = 0) -> DiTStream:
        """A hop-by-hop stream for one utterance (speed 1). ``cfg_steps``, ``cache_budget`` and
        ``expected_tokens`` (the caches sized once, within the budget) as :meth:`Token2Wav.stream`;
        ``rng``, ``left_chunks`` and ``first_hop_tokens`` are accepted for its signature and not used."""
        if not self.can_stream:
            raise ParameterError("this model directory has no streamed DiT graph; convert it again")
        prompt_tokens, prompt_mel, embedding, steps = self.flow.checked_prompt(prompt_tokens, prompt_mel,
                                                                               speaker_embedding, n_timesteps)
        stream = DiTStream(self, prompt_tokens, prompt_mel, embedding, steps, cfg_steps, cache_budget)
        if expected_tokens > 0:
            tokens = expected_tokens
            if cache_budget:
                per_token = stream.ratio * self.layout.cache_bytes_per_frame(steps, cfg_steps)
                tokens = min(tokens, max(0, cache_budget // per_token - stream.n_prompt))
            stream.reserve(tokens)
        self._streams.add(stream)
        return stream
