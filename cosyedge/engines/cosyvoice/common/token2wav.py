"""Speech tokens -> 24 kHz audio: flow matching then HiFT, onnxruntime + numpy only (no torch).

    t2w = Token2Wav.load("models/cosyvoice2-int8", threads=2)
    audio = t2w(tokens, prompt_tokens, prompt_mel, speaker_embedding, speed=1.0)

Streamed, hop by hop as the LLM makes tokens (upstream's ``stream=True``)::

    stream = t2w.stream(prompt_tokens, prompt_mel, speaker_embedding)
    for token_batch in llm_tokens:
        for audio in stream.push(token_batch):   # 0 or more hops
            play(audio)
    play(stream.finish())

``prompt_mel`` is the prompt's 80-bin flow mel, frames first ([2 x prompt tokens, 80], see
:func:`cosyedge.engines.cosyvoice.common.features.prompt_mel`); ``speaker_embedding`` is campplus's [192] output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosyedge.engines.cosyvoice.common.flow import FlowDecoder, FlowParams, FlowStream, StreamLayout, resample_mel
from cosyedge.engines.cosyvoice.common.hift import HiftParams, HiftStream, HiftVocoder
from cosyedge.engines.cosyvoice.common.manifest import ModelDir
from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)

SPEED_RANGE = (0.5, 2.0)
HOP_TOKENS = 25        # upstream CosyVoice2Model.token_hop_len (the encoder's chunk)
MEL_CACHE_FRAMES = 8   # upstream CosyVoice2Model.mel_cache_len


def check_speed(speed: float) -> float:
    """``speed`` as a float within :data:`SPEED_RANGE`; a ParameterError otherwise."""
    speed = float(speed)
    if not (SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]):
        raise ParameterError(f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}")
    return speed


def load_vocoder(model: ModelDir, threads: int = 0, kind: type[HiftVocoder] = HiftVocoder) -> HiftVocoder:
    """The HiFT vocoder of the manifest's ``hift`` entry: F0 and decoder graphs, source layer."""
    hc = model.config("hift")
    with np.load(model.file(hc["source"])) as source:
        weight, bias = source["weight"], source["bias"]
    return kind(model.session(hc["f0"], threads), model.session(hc["decoder"], threads), weight, bias,
                HiftParams.from_dict(hc))


class Token2WavStream:
    """Upstream's hop schedule (``CosyVoice2Model.tts(stream=True)`` at 46dfe04) over a
    :class:`FlowStream` and a :class:`HiftStream`.

    The first hop is 25 tokens plus the padding that ends the prompt's last chunk (0-24), later hops
    25; a hop is vocoded once its tokens and the 3 look-ahead tokens after it are there. The rest is
    vocoded by :meth:`finish` (``finalize=True``). One deliberate difference: upstream's glue runs that
    last call with ``streaming=False`` (full attention over the whole utterance, which only a full
    recomputation can give); here it is the chunk-causal ``streaming=True, finalize=True`` call.

    Memory budget: the flow's caches grow by ``StreamLayout.cache_bytes_per_frame`` per mel frame
    (2.2 MiB at full size, 10 steps), so a long sentence could take gigabytes. With
    ``cache_budget`` (bytes, 0 = none), once the prompt and the tokens so far would pass it, the
    stream stops (:attr:`limited`), frees its caches and keeps the tokens; :meth:`finish` renders the
    whole sentence as the non-streamed path does and sends its audio from the first sample not yet
    sent, faded in over the held-back tail as between hops. So nothing is sent twice or left out,
    and the budget is kept however long the LLM runs (a prediction from its token limit would refuse
    most sentences: it allows 20 tokens per text token, speech uses far fewer).
    """

    def __init__(self, flow: FlowStream, vocoder: HiftStream, hop_tokens: int = HOP_TOKENS,
                 cache_budget: int = 0, first_hop_tokens: int = 0) -> None:
        self.flow, self.vocoder = flow, vocoder
        self.hop_tokens = hop_tokens
        self.cache_budget = cache_budget
        self.limited = False                  # past the budget: the rest is rendered whole
        self._target: list[int] = []          # every target token, for that whole render
        self._sent = 0                        # samples handed out so far
        self.ratio = flow.ratio
        self._pad = -flow.n_prompt % hop_tokens
        # A first hop shorter than upstream's (the quality lever): it ends inside a chunk.
        self.first_hop = first_hop_tokens if 0 < first_hop_tokens < hop_tokens + self._pad else 0
        self._offset = 0                      # target tokens already vocoded
        self._mel = np.zeros((flow.decoder.params.mel_bins, 0), dtype=np.float32)  # computed, not vocoded
        self._previewed = 0                   # frames the flow will give again that a preview vocoded
        self.hops = 0

    @property
    def lookahead(self) -> int:
        return self.flow.lookahead

    @property
    def tokens_rendered(self) -> int:
        """Target tokens whose audio has been handed out (hop ends)."""
        return self._offset

    def _hop_end(self) -> int:
        """The target token the next hop ends before: upstream's 25 + pad, then every 25 more; a
        shorter first hop adds one end before upstream's first."""
        upstream_first = self.hop_tokens + self._pad
        if self._offset == 0 and self.first_hop:
            return self.first_hop
        if self._offset < upstream_first:
            return upstream_first
        return self._offset + self.hop_tokens

    def _over_budget(self, new_tokens: int) -> bool:
        if not self.cache_budget:
            return False
        flow = self.flow
        frames = (flow.n_prompt + flow.tokens_pushed + new_tokens) * self.ratio
        if flow.left_chunks:  # a bounded stream's estimator cache stops growing
            frames = min(frames, flow.left_chunks * flow.layout.chunk_tokens * self.ratio)
        return frames * flow.layout.cache_bytes_per_frame(flow.n_timesteps, flow.cfg_steps) > self.cache_budget

    def _flow_mel(self, mel: np.ndarray) -> np.ndarray:
        """The flow's new mel without the frames a preview has vocoded already."""
        drop = min(self._previewed, mel.shape[1])
        self._previewed -= drop
        return mel[:, drop:]

    def push(self, tokens) -> list[np.ndarray]:
        """Add target tokens; returns the audio of every hop now complete (often none)."""
        new = np.asarray(tokens if tokens is not None else [], dtype=np.int64).reshape(-1)
        if not self.limited and self._over_budget(new.size):
            logger.info("streamed flow cache would pass %.0f MB after %d tokens: rendering the sentence whole",
                        self.cache_budget / 2 ** 20, self.flow.tokens_pushed)
            self.limited = True
            self.flow.close()
            self._mel = self._mel[:, :0]
        if self.limited:
            self._target.extend(int(t) for t in new)
            return []
        self._mel = np.concatenate([self._mel, self._flow_mel(self.flow.push(new))], axis=1)
        self._target.extend(int(t) for t in new)
        out = []
        while self.flow.tokens_pushed >= self._hop_end() + self.flow.lookahead:
            end = self._hop_end()
            frames = (end - self._offset) * self.ratio
            if self._mel.shape[1] >= frames:
                hop, self._mel = self._mel[:, :frames], self._mel[:, frames:]
            elif self._offset == 0 and self.first_hop:  # the short first hop ends inside a chunk
                preview = self.flow.preview(self.flow.n_prompt + end)
                hop, self._mel = np.concatenate([self._mel, preview], axis=1), self._mel[:, :0]
                self._previewed = preview.shape[1]
            else:  # other hops end on chunk ends, which the flow has computed by now
                raise RuntimeError(f"hop needs {frames} mel frames, the flow has {self._mel.shape[1]}")
            self._offset = end
            self.hops += 1
            out.append(self.vocoder.push(hop))
            self._sent += out[-1].shape[0]
        return out

    def close(self) -> None:
        """Stop without the rest (a cancel or an error): the flow's caches are freed now."""
        self.flow.close()

    def finish(self) -> np.ndarray:
        """The audio of the remaining tokens and the held-back tail."""
        if self.limited:
            self.hops += 1
            return self._finish_whole()
        mel = np.concatenate([self._mel, self._flow_mel(self.flow.finish())], axis=1)
        self._mel = mel[:, :0]
        self.hops += 1
        return self.vocoder.push(mel, final=True)

    def _finish_whole(self) -> np.ndarray:
        """The whole sentence rendered as not streamed, from the first sample not sent yet."""
        if not self._target:
            return np.zeros(0, dtype=np.float32)
        flow, hift = self.flow, self.vocoder
        mel = flow.decoder(self._target, flow.prompt_tokens, flow.prompt_mel, flow.embedding, flow.n_timesteps,
                           cfg_steps=flow.cfg_steps)
        audio = hift.vocoder(mel, rng=hift.rng)[self._sent:]
        held = hift.held_back()
        if held is not None:  # the streamed tail not yet sent: fade into the whole render over it
            n = min(held.shape[0], audio.shape[0])
            audio[:n] = (audio[:n] * hift.window[:n] + held[:n] * hift.window[-held.shape[0]:][:n]).astype(np.float32)
        return audio


@dataclass
class Token2Wav:
    """The flow decoder and the vocoder of one model directory."""

    flow: FlowDecoder
    vocoder: HiftVocoder

    @classmethod
    def load(cls, model_dir: Path | str | ModelDir, threads: int = 0, verify_hashes: bool = False) -> "Token2Wav":
        """Open the four graphs and side files listed in ``manifest.json`` (CPU, ``threads`` intra-op)."""
        model = model_dir if isinstance(model_dir, ModelDir) else ModelDir.load(model_dir, verify_hashes)
        fc = model.config("flow")
        stream = fc.get("stream")
        stream_sessions = ((model.session(stream["encoder"], threads), model.session(stream["estimator"], threads))
                           if stream else None)
        flow = FlowDecoder(model.session(fc["encoder"], threads), model.session(fc["estimator"], threads),
                           np.load(model.file(fc["noise"])), FlowParams.from_dict(fc), stream_sessions,
                           StreamLayout.from_dict(stream) if stream else None)
        return cls(flow, load_vocoder(model, threads))

    @property
    def can_stream(self) -> bool:
        return self.flow.can_stream

    @property
    def can_bound_context(self) -> bool:
        """True when a stream's left context can be bounded (the ``left_chunks`` lever)."""
        return self.flow.can_stream and self.flow.stream_layout.can_bound_context

    @property
    def can_shorten_first_hop(self) -> bool:
        """True when a stream's first hop can be shorter than upstream's (``first_hop_tokens``)."""
        return self.flow.can_stream

    def stream(self, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps: int | None = None,
               rng: np.random.Generator | None = None, cache_budget: int = 0,
               expected_tokens: int = 0, *, cfg_steps: int | None = None, left_chunks: int = 0,
               first_hop_tokens: int = 0) -> Token2WavStream:
        """A hop-by-hop stream for one utterance (speed 1 only, as upstream's streaming); past
        ``cache_budget`` bytes of flow cache (0 = no limit) it finishes the sentence whole.

        ``expected_tokens``: the most target tokens the sentence can have (the LLM's limit), so that
        the flow's caches are sized once, within the budget (0: they grow as tokens come).
        ``cfg_steps``, ``left_chunks`` and ``first_hop_tokens``: the quality levers
        (:mod:`~cosyedge.engines.cosyvoice.common.quality`; the defaults are upstream's)."""
        flow = self.flow.stream(prompt_tokens, prompt_mel, speaker_embedding, n_timesteps, cfg_steps=cfg_steps,
                                left_chunks=left_chunks)
        if expected_tokens > 0:
            tokens = expected_tokens
            if cache_budget:
                per_token = flow.ratio * flow.layout.cache_bytes_per_frame(flow.n_timesteps, cfg_steps)
                tokens = min(tokens, max(0, cache_budget // per_token - flow.n_prompt))
            flow.reserve(tokens)
        return Token2WavStream(flow, HiftStream(self.vocoder, MEL_CACHE_FRAMES, rng=rng), cache_budget=cache_budget,
                               first_hop_tokens=first_hop_tokens)

    @property
    def sample_rate(self) -> int:
        return self.vocoder.params.sampling_rate

    def mel(self, tokens, prompt_tokens, prompt_mel, speaker_embedding, speed: float = 1.0,
            n_timesteps: int | None = None, cfg_steps: int | None = None) -> np.ndarray:
        """The mel [80, frames] that :meth:`__call__` vocodes (after the speed change)."""
        speed = check_speed(speed)
        mel = self.flow(tokens, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps, cfg_steps=cfg_steps)
        return resample_mel(mel, speed) if speed != 1.0 else mel

    def __call__(self, tokens, prompt_tokens, prompt_mel, speaker_embedding, speed: float = 1.0,
                 n_timesteps: int | None = None, rng: np.random.Generator | None = None,
                 cfg_steps: int | None = None) -> np.ndarray:
        """float32 audio at :attr:`sample_rate`, 480 samples per mel frame, within +-0.99; ``cfg_steps``:
        guidance on the first that many flow steps only (None: every step, upstream)."""
        mel = self.mel(tokens, prompt_tokens, prompt_mel, speaker_embedding, speed, n_timesteps, cfg_steps)
        return self.vocoder(mel, rng=rng)
