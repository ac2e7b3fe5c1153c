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

Streaming (:class:`FlowStream`, upstream's ``streaming=True``): the flow is chunk-causal (the encoder
attends within its 25-token chunk and to every earlier one, the estimator likewise with 50 frames), so
each chunk is computed once, by the converter's chunk-step graphs, from caches of the earlier chunks:
attention keys/values (per Euler step for the estimator) and the causal convolutions' last frames. A
chunk waits for the 3 look-ahead tokens after it (upstream's ``context``), except at the end.

Voice prompt cache: the prompt's chunks whose look-ahead is still prompt do not depend on the text, so
their state (caches per Euler step) is kept after a sentence for the next one with the same prompt,
embedding and step count (:class:`PromptStates`; one voice by default). It is handed to one stream at
a time and given back, cut to the prompt's frames, when that stream finishes.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from cosyedge.engines.cosyvoice.common.flow_cache import BlockedStepCache, GrowingRows, PackedStepCache
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
    pre_lookahead_len: int = 3

    @classmethod
    def from_dict(cls, values: dict) -> "FlowParams":
        return cls(**{k: values[k] for k in cls.__dataclass_fields__ if k in values})


def cosine_schedule(n_timesteps: int) -> np.ndarray:
    """``1 - cos(linspace(0, 1, n+1) * pi/2)`` in float32, as upstream."""
    t = np.linspace(0.0, 1.0, n_timesteps + 1, dtype=np.float32)
    return (np.float32(1.0) - np.cos(t * np.float32(0.5) * np.float32(np.pi))).astype(np.float32)


@dataclass(frozen=True)
class StreamLayout:
    """Chunk size and cache shapes of the chunk-step graphs (the manifest's ``flow.stream``).

    ``kv_layout`` is how the estimator step takes its key/value cache: ``chunk_blocked`` (per layer, in
    the layout its attention reads: :class:`~cosyedge.engines.cosyvoice.common.flow_cache.BlockedStepCache`)
    or, in models converted before that existed (no ``kv_layout`` in the manifest), ``frame_packed``.
    """

    chunk_tokens: int = 25
    conv_tail: int = 2
    model_dim: int = 512
    down_layers: int = 6
    up_layers: int = 4
    attention_layers: int = 56
    inner: int = 512
    conv_layers: int = 31
    conv_channels: int = 512
    kv_dtype: str = "float32"   # the estimator's key/value cache (float16 in int8 models)
    kv_layout: str = "frame_packed"
    heads: int = 8
    head_dim: int = 64
    chunk_frames: int = 50

    @classmethod
    def from_dict(cls, values: dict) -> "StreamLayout":
        return cls(**{k: (str(values[k]) if k in ("kv_dtype", "kv_layout") else int(values[k]))
                      for k in cls.__dataclass_fields__ if k in values})

    @property
    def blocked(self) -> bool:
        return self.kv_layout == "chunk_blocked"

    def cache_bytes_per_frame(self, n_timesteps: int, cfg_steps: int | None = None) -> int:
        """Estimator key/value bytes one mel frame adds (every step; both CFG rows on a guided step,
        one on the others, see :func:`cfg_rows`): the memory a streamed sentence grows by, since every
        chunk attends to all earlier ones (unless its left context is bounded)."""
        rows = sum(cfg_rows(step, cfg_steps) for step in range(n_timesteps))
        return self.attention_layers * 2 * self.inner * np.dtype(self.kv_dtype).itemsize * rows

    def step_cache(self, frames: int = 0, batch: int = 2, ring: int = 0):
        """An empty key/value cache for one Euler step (``batch`` rows: 2 with CFG, 1 without), with
        room for ``frames`` frames; ``ring`` > 0 (chunk-blocked only): a ring of that many chunks
        (:meth:`~cosyedge.engines.cosyvoice.common.flow_cache.BlockedStepCache.ring_of`)."""
        if self.blocked:
            return BlockedStepCache(self.attention_layers, self.heads, self.head_dim, self.chunk_frames,
                                    self.kv_dtype, capacity_chunks=-(-frames // self.chunk_frames), batch=batch,
                                    ring=ring)
        return PackedStepCache(self.attention_layers, self.inner, self.kv_dtype, capacity_frames=frames,
                               batch=batch)

    @property
    def can_bound_context(self) -> bool:
        """True when a stream's left context can be bounded (the chunk-blocked cache drops its oldest
        chunks; the first converter's packed cache keeps every frame)."""
        return self.blocked


def cfg_rows(step: int, cfg_steps: int | None) -> int:
    """The estimator's batch at Euler step ``step`` (0-based): 2 (conditional and unconditional rows,
    classifier-free guidance) on the first ``cfg_steps`` steps (None: every step), else 1."""
    return 2 if cfg_steps is None or step < cfg_steps else 1


class FlowDecoder:
    """Encoder-front and estimator sessions plus the fixed noise; built from ready objects.

    ``stream_sessions`` (encoder step, estimator step) and ``stream_layout`` enable :meth:`stream`;
    model directories from converters before streaming have neither.
    """

    def __init__(self, encoder_session, estimator_session, noise: np.ndarray, params: FlowParams,
                 stream_sessions: tuple | None = None, stream_layout: StreamLayout | None = None) -> None:
        self.encoder_session = encoder_session
        self.estimator_session = estimator_session
        self.noise = np.asarray(noise, dtype=np.float32)    # [80, max_frames]
        self.params = params
        self._mask_input = "mask" in {i.name for i in estimator_session.get_inputs()}
        self.stream_sessions = stream_sessions
        self.stream_layout = stream_layout if stream_sessions else None
        self.prompt_states = PromptStates()
        self._streams: weakref.WeakSet = weakref.WeakSet()

    @property
    def stream_cache_bytes(self) -> int:
        """Bytes the caches of the streams still open hold now (the voice prompt states aside): what
        streaming holds beyond the models; 0 once every stream has finished or been closed."""
        return sum(stream.cache_bytes for stream in list(self._streams))

    @property
    def can_stream(self) -> bool:
        return self.stream_sessions is not None

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
              cfg_rate: float | None = None, noise: np.ndarray | None = None,
              cfg_steps: int | None = None) -> np.ndarray:
        """Euler CFM from the fixed noise: mu/cond [80, T], spks [80] -> mel [80, T].

        ``noise`` [80, T] starts from there instead (CosyVoice-300M draws fresh noise per call).
        ``cfg_steps``: guidance on the first that many steps only (None: every step, upstream); the
        others run the conditional row alone (:func:`cfg_rows`)."""
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
            if cfg_rows(step - 1, cfg_steps) == 2:
                x_in = np.stack([x, x])
                v = self.estimate(x_in, mu_in, np.full(2, t, dtype=np.float32), spks_in, cond_in)
                x = x + dt * ((np.float32(1.0) + rate) * v[0] - rate * v[1])
            else:
                v = self.estimate(x[None], mu_in[:1], np.full(1, t, dtype=np.float32), spks_in[:1], cond_in[:1])
                x = x + dt * v[0]
            t = np.float32(t + dt)
            if step < n_timesteps:
                dt = t_span[step + 1] - t
        return x.astype(np.float32)

    def checked_prompt(self, prompt_tokens, prompt_mel, embedding, n_timesteps):
        """Checked (prompt tokens, prompt mel [2P, 80] cut to 2 frames per token, embedding, steps)."""
        p = self.params
        prompt_tokens = check_tokens(prompt_tokens, "prompt_tokens", p.vocab_size, allow_empty=True)
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
        return prompt_tokens[:n_prompt], prompt_mel[:n_prompt * p.token_mel_ratio], embedding, steps

    def stream(self, prompt_tokens, prompt_mel, embedding, n_timesteps: int | None = None, *,
               cfg_steps: int | None = None, left_chunks: int = 0) -> "FlowStream":
        """A :class:`FlowStream` for one utterance with this prompt (needs the chunk-step graphs).

        ``cfg_steps`` as in :meth:`solve`; ``left_chunks`` > 0 bounds how many earlier chunks each
        chunk's estimator attention sees (0: all, upstream), where the layout can
        (:attr:`StreamLayout.can_bound_context`; elsewhere it is ignored)."""
        if not self.can_stream:
            raise ParameterError("this model directory has no streaming flow graphs; convert it again")
        prompt_tokens, prompt_mel, embedding, steps = self.checked_prompt(prompt_tokens, prompt_mel, embedding,
                                                                          n_timesteps)
        left_chunks = left_chunks if self.stream_layout.can_bound_context else 0
        # the levers change every cached state: a prompt state is kept per setting of them
        variant = f"{steps}" if cfg_steps is None and not left_chunks else f"{steps}/{cfg_steps}/{left_chunks}"
        key = PromptStates.key(prompt_tokens, prompt_mel, embedding, variant)
        stream = FlowStream(self, prompt_tokens, prompt_mel, embedding, steps,
                            cached=self.prompt_states.take(key), cache_key=key, cfg_steps=cfg_steps,
                            left_chunks=left_chunks)
        self._streams.add(stream)
        return stream

    def __call__(self, tokens: np.ndarray, prompt_tokens: np.ndarray, prompt_mel: np.ndarray,
                 embedding: np.ndarray, n_timesteps: int | None = None, cfg_steps: int | None = None) -> np.ndarray:
        """Target tokens [N] (+ prompt tokens [P], prompt mel [2P, 80]) -> mel [80, 2N]; ``cfg_steps``
        as in :meth:`solve`."""
        p = self.params
        tokens = check_tokens(tokens, "tokens", p.vocab_size, allow_empty=False)
        prompt_tokens, prompt_mel, embedding, steps = self.checked_prompt(prompt_tokens, prompt_mel, embedding,
                                                                   n_timesteps)
        n_prompt = prompt_tokens.shape[0]
        total = (n_prompt + tokens.shape[0]) * p.token_mel_ratio
        if total > self.max_frames:
            raise ParameterError(f"prompt + text need {total} mel frames; the model allows {self.max_frames}")
        mu, spks = self.encode(np.concatenate([prompt_tokens, tokens]), embedding)
        cond = np.zeros_like(mu)
        cond[:, :prompt_mel.shape[0]] = prompt_mel.T
        mel = self.solve(mu, spks, cond, steps, cfg_steps=cfg_steps)
        return mel[:, prompt_mel.shape[0]:]


#: The time-first buffer of the encoder's caches (and of the first converter's packed estimator cache).
_Growing = GrowingRows


@dataclass
class _PromptState:
    """A stream's caches right after the prompt's text-independent chunks (``done`` tokens)."""

    done: int
    pre_tail: np.ndarray
    up_tail: np.ndarray
    kv_down: GrowingRows
    kv_up: GrowingRows
    kv: list            # one step cache per Euler step (flow_cache)
    conv: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        return self.kv_down.nbytes + self.kv_up.nbytes + sum(kv.nbytes for kv in self.kv)


class PromptStates:
    """The prompt states of the last ``size`` voices (prompt, embedding, step count), for
    :meth:`FlowDecoder.stream`. A state is taken by one stream and put back when it finishes, so
    two sentences at once never share buffers (the second computes its own)."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._states: OrderedDict[str, _PromptState] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(prompt_tokens: np.ndarray, prompt_mel: np.ndarray, embedding: np.ndarray, steps: int | str) -> str:
        digest = hashlib.sha1()
        for part in (prompt_tokens.astype(np.int64), prompt_mel.astype(np.float32), embedding.astype(np.float32)):
            digest.update(np.ascontiguousarray(part).tobytes())
        return f"{steps}:{digest.hexdigest()}"

    def take(self, key: str) -> _PromptState | None:
        with self._lock:
            return self._states.pop(key, None)

    def put(self, key: str, state: _PromptState) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > self.size:
                self._states.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(state.nbytes for state in self._states.values())


class FlowStream:
    """One utterance's chunk-causal flow: :meth:`push` speech tokens as the LLM makes them and get the
    mel of every chunk that became computable; :meth:`finish` computes the rest.

    Equal, chunk by chunk, to upstream ``flow.inference(..., streaming=True)`` on the tokens so far
    (``finalize=False`` with the 3 look-ahead tokens, ``finalize=True`` at the end); each chunk's work
    is done once. Chunks are counted from the first prompt token, so the first one that holds target
    tokens may also hold the prompt's last tokens (their frames are not returned).

    Its caches (:mod:`~cosyedge.engines.cosyvoice.common.flow_cache`) are freed when it finishes or is
    closed, however long the object itself is kept (a traceback may hold it).
    """

    def __init__(self, decoder: FlowDecoder, prompt_tokens: np.ndarray, prompt_mel: np.ndarray,
                 embedding: np.ndarray, n_timesteps: int, cached: _PromptState | None = None,
                 cache_key: str | None = None, cfg_steps: int | None = None, left_chunks: int = 0) -> None:
        self.decoder = decoder
        layout = decoder.stream_layout
        self.layout = layout
        self.ratio = decoder.params.token_mel_ratio
        self.lookahead = decoder.params.pre_lookahead_len
        self.embedding = embedding.reshape(1, -1)
        self.prompt_mel = prompt_mel                                   # [2P, 80]
        self.n_prompt = int(prompt_tokens.shape[0])
        self.n_timesteps = n_timesteps
        self.cfg_steps = cfg_steps                                     # CFG on the first cfg_steps steps (None: all)
        self.left_chunks = left_chunks                                 # earlier chunks attended (0: all)
        self._tokens = [int(t) for t in prompt_tokens]                  # every token so far, prompt first
        self._done = 0                                                 # tokens whose chunk is computed
        d = layout.model_dim
        self._pre_tail = np.zeros((1, layout.conv_tail, d), dtype=np.float32)
        self._up_tail = np.zeros((1, layout.conv_tail, d), dtype=np.float32)
        self._kv_down = GrowingRows((layout.down_layers, 2, 1, d))
        self._kv_up = GrowingRows((layout.up_layers, 2, 1, d), capacity=128)
        # Room for the prompt's frames (at least a chunk's); reserve() makes the sentence's when needed.
        room = max(self.n_prompt * self.ratio, layout.chunk_frames)
        self._kv = [layout.step_cache(room, batch=self._rows(step), ring=left_chunks) for step in range(n_timesteps)]
        self._conv = [np.zeros((layout.conv_layers, self._rows(step), layout.conv_tail, layout.conv_channels),
                               dtype=np.float32) for step in range(n_timesteps)]
        self._finished = False
        # The prompt's chunks whose look-ahead is still prompt: the state after them is the voice's.
        chunk = layout.chunk_tokens
        self._prompt_done = max(0, (self.n_prompt - self.lookahead) // chunk * chunk)
        self._cache_key = cache_key if self._prompt_done else None
        self._snapshot: tuple | None = None
        self.prompt_cached = cached is not None
        if cached is not None:
            self._done, self._pre_tail, self._up_tail = cached.done, cached.pre_tail, cached.up_tail
            self._kv_down, self._kv_up, self._kv, self._conv = cached.kv_down, cached.kv_up, cached.kv, cached.conv
            self._take_snapshot()
            if left_chunks:  # the snapshot keeps the state's rings; this stream writes over copies
                self._kv = [kv.ring_of(left_chunks) for kv in self._kv]

    def _rows(self, step: int) -> int:
        """The estimator's batch at Euler step ``step``: 2 with CFG, 1 without (:func:`cfg_rows`)."""
        return cfg_rows(step, self.cfg_steps)

    @property
    def tokens_pushed(self) -> int:
        return len(self._tokens) - self.n_prompt

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the caches now (they grow with the utterance: attention sees every chunk)."""
        return (self._kv_down.nbytes + self._kv_up.nbytes + sum(kv.nbytes for kv in self._kv)
                + sum(c.nbytes for c in self._conv))

    def reserve(self, tokens: int) -> None:
        """Room in the caches for the prompt and ``tokens`` target tokens, made now (one resize per
        sentence; pages never written stay free, see flow_cache)."""
        total = self.n_prompt + max(0, int(tokens))
        self._kv_down.reserve(total)
        self._kv_up.reserve(total * self.ratio)
        for kv in self._kv:
            kv.reserve(total * self.ratio)

    def push(self, tokens) -> np.ndarray:
        """Add target tokens; returns the mel [80, frames] of the chunks now complete (may be empty)."""
        if self._finished:
            raise ParameterError("this flow stream is finished")
        new = check_tokens(tokens, "tokens", self.decoder.params.vocab_size, allow_empty=True)
        self._tokens.extend(int(t) for t in new)
        return self._run(final=False)

    def finish(self) -> np.ndarray:
        """The mel of the remaining tokens (upstream's ``finalize=True`` call); the stream then ends,
        gives the voice's prompt state back to its decoder and frees its caches."""
        try:
            return self._run(final=True)
        finally:
            self.close()

    @property
    def prompt_tokens(self) -> np.ndarray:
        return np.asarray(self._tokens[:self.n_prompt], dtype=np.int64)

    def close(self) -> None:
        """End the stream without computing the rest (a cancel, or the sentence rendered whole, see
        :class:`~cosyedge.engines.cosyvoice.common.token2wav.Token2WavStream`): the voice's prompt
        state goes back to its decoder and the caches are freed. Closing twice does nothing."""
        self._finished = True
        self._give_back_prompt_state()
        layout, d = self.layout, self.layout.model_dim
        self._kv_down = GrowingRows((layout.down_layers, 2, 1, d), capacity=0)
        self._kv_up = GrowingRows((layout.up_layers, 2, 1, d), capacity=0)
        self._kv, self._conv = [layout.step_cache(0) for _ in self._kv], []

    def _take_snapshot(self) -> None:
        """Note the caches' lengths and copy the small tails once the prompt's own chunks are done
        (the big buffers are cut back to these lengths at the end: appends leave earlier rows alone).
        A bounded stream's rings are overwritten as it goes: they are copied now."""
        kv = [ring.ring_of(self.left_chunks) for ring in self._kv] if self.left_chunks else \
            [cache.length for cache in self._kv]
        self._snapshot = (self._done, self._pre_tail.copy(), self._up_tail.copy(), self._kv_down.length,
                          self._kv_up.length, kv, [c.copy() for c in self._conv])

    def _give_back_prompt_state(self) -> None:
        if self._cache_key is None or self._snapshot is None:
            return
        done, pre_tail, up_tail, down_len, up_len, kv, conv = self._snapshot
        chunk, frames = self.layout.chunk_tokens, self.layout.chunk_tokens * self.ratio
        if not self.left_chunks:
            kv = [cache.compact(n, frames) for cache, n in zip(self._kv, kv)]
        state = _PromptState(done, pre_tail, up_tail, self._kv_down.compact(down_len, chunk),
                             self._kv_up.compact(up_len, frames), kv, conv)
        self._snapshot = None
        self.decoder.prompt_states.put(self._cache_key, state)

    def _run(self, final: bool) -> np.ndarray:
        chunk, out = self.layout.chunk_tokens, []
        max_frames = self.decoder.max_frames
        while self._done < len(self._tokens):
            end = min(self._done + chunk, len(self._tokens))
            if not final and (end - self._done < chunk or len(self._tokens) - end < self.lookahead):
                break
            if end * self.ratio > max_frames:
                raise ParameterError(f"prompt + text need over {max_frames} mel frames; the model allows "
                                     f"{max_frames}")
            mel = self._chunk(self._done, end)
            first_target = max(0, self.n_prompt * self.ratio - self._done * self.ratio)
            out.append(mel[:, first_target:])
            self._done = end
            if self._done == self._prompt_done and self._cache_key is not None and self._snapshot is None:
                self._take_snapshot()
        if not out:
            return np.zeros((self.decoder.params.mel_bins, 0), dtype=np.float32)
        return np.concatenate(out, axis=1)

    def preview(self, end: int) -> np.ndarray:
        """The mel [80, frames] of the target tokens before token ``end`` (counted from the first prompt
        token) that no chunk has given yet, rendered from the partial chunk up to ``end`` and left out
        of the caches: what upstream's flow gives for a hop that ends inside a chunk. The chunk is
        rendered again, whole, when its tokens and look-ahead are in. Needs the look-ahead tokens
        after ``end`` (or the end of the sentence) and ``end`` within the chunk after the last one done."""
        if self._finished:
            raise ParameterError("this flow stream is finished")
        chunk = self.layout.chunk_tokens
        if not self._done < end <= min(self._done + chunk, len(self._tokens)):
            raise ValueError(f"a preview ends inside the next chunk ({self._done}, {self._done + chunk}]; "
                             f"got {end} with {len(self._tokens)} tokens")
        mel = self._chunk(self._done, end, keep=False)
        return mel[:, max(0, (self.n_prompt - self._done) * self.ratio):]

    def _chunk(self, start: int, end: int, keep: bool = True) -> np.ndarray:
        """Encoder step then the Euler steps for tokens [start, end); returns all its frames [80, 2L].
        ``keep=False`` leaves every cache as it was (a :meth:`preview`)."""
        encoder, estimator = self.decoder.stream_sessions
        context = self._tokens[end:end + self.lookahead]
        n_context = len(context)
        context = context + [0] * (self.lookahead - n_context)
        mu, spks, pre_tail, kv_down, up_tail, kv_up = encoder.run(None, {
            "tokens": np.asarray(self._tokens[start:end], dtype=np.int64)[None],
            "context": np.asarray(context, dtype=np.int64)[None],
            "n_context": np.asarray([n_context], dtype=np.int64), "embedding": self.embedding,
            "pre_tail": self._pre_tail, "kv_down": self._kv_down.view(), "up_tail": self._up_tail,
            "kv_up": self._kv_up.view()})
        if keep:
            self._pre_tail, self._up_tail = pre_tail, up_tail
            self._kv_down.append(kv_down)
            self._kv_up.append(kv_up)
        f0, frames = start * self.ratio, mu.shape[2]
        mu_in = np.zeros((2, mu.shape[1], frames), dtype=np.float32)
        mu_in[0] = mu[0]
        spks_in = np.zeros((2, spks.shape[1]), dtype=np.float32)
        spks_in[0] = spks[0]
        cond_in = np.zeros_like(mu_in)
        prompt_part = self.prompt_mel[f0:f0 + frames]
        cond_in[0, :, :prompt_part.shape[0]] = prompt_part.T
        x = self.decoder.noise[:, f0:f0 + frames].copy()
        rate = np.float32(self.decoder.params.inference_cfg_rate)
        t_span = cosine_schedule(self.n_timesteps)
        t, dt = t_span[0], t_span[1] - t_span[0]
        for step in range(self.n_timesteps):
            rows = self._rows(step)  # 1: the conditional row alone, no CFG at this step
            v, *kv, conv = estimator.run(None, {
                "x": np.stack([x] * rows), "mu": mu_in[:rows], "t": np.full(rows, t, dtype=np.float32),
                "spks": spks_in[:rows], "cond": cond_in[:rows], "conv": self._conv[step],
                **self._kv[step].feeds()})
            if keep:
                self._conv[step] = conv
                self._kv[step].append(kv)
            x = x + dt * ((np.float32(1.0) + rate) * v[0] - rate * v[1] if rows == 2 else v[0])
            t = np.float32(t + dt)
            if step + 1 < self.n_timesteps:
                dt = t_span[step + 2] - t
        return x.astype(np.float32)


def check_tokens(values, name: str, vocab: int, allow_empty: bool) -> np.ndarray:
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
