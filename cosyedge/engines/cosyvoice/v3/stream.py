"""CosyVoice3 streamed hop by hop, as upstream's ``CosyVoice3Model.tts(stream=True)`` at ace7c47.

Upstream's semantics, step for step:

* Hop schedule: the first hop is 25 target tokens plus the padding that ends the prompt's last 25-token
  chunk; each later hop doubles up to 100 (25 + pad, 50, 100, 100, ...). A hop is rendered once its
  tokens and the 3 look-ahead tokens after it are there; the rest goes in one final call.
* Flow (``CausalMaskedDiffWithDiT.inference(streaming=True)``): the pre-lookahead layer reads the 3
  look-ahead tokens as real right context (``finalize=False``; zeros at the end with ``finalize=True``);
  the DiT runs over every frame so far, prompt first, with chunk-causal attention (frame i sees the
  frames before the end of its 50-frame chunk): the converter's streamed estimator graph. The hop's mel
  is the result from the hop's first frame. As every hop ends on a chunk end, the frames of earlier
  hops come out as before: recomputing them (this version's cost: the DiT over all frames each hop) is
  what upstream does.
* Vocoder (``CausalHiFTGenerator.inference``): the whole target mel so far is vocoded at each hop and the
  samples not sent yet are sent. With ``finalize=False`` the F0 predictor reads its last 3 frames as
  context only and the decoder its last 4 more, and the last frame's samples are held back
  (:meth:`~cosyedge.engines.cosyvoice.v3.causal_hift.CausalHiftVocoder.streamed`).

One deliberate difference, shared with the CosyVoice2 stream: upstream's glue makes the last call with
``streaming=False`` (full attention over the whole sentence); here it is the chunk-causal
``streaming=True, finalize=True`` call, so that the stream never depends on a whole-sentence
recomputation (a later, cached form of this stream computes each chunk once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from cosyedge.engines.cosyvoice.common.flow import FlowDecoder, check_tokens
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HopSchedule:
    """Upstream's hop lengths in target tokens (the manifest's ``flow.stream``)."""

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

    It keeps only the tokens and the target mel so far (no flow cache), so the stream cache budget
    never stops it (:attr:`limited` stays False).
    """

    limited = False

    def __init__(self, flow: FlowDecoder, vocoder, schedule: HopSchedule, prompt_tokens: np.ndarray,
                 prompt_mel: np.ndarray, embedding: np.ndarray, n_timesteps: int,
                 cfg_steps: int | None = None) -> None:
        self.flow, self.vocoder, self.schedule = flow, vocoder, schedule
        self.ratio = flow.params.token_mel_ratio
        self.lookahead = flow.params.pre_lookahead_len
        self.prompt_tokens, self.prompt_mel, self.embedding = prompt_tokens, prompt_mel, embedding
        self.n_timesteps, self.cfg_steps = n_timesteps, cfg_steps
        self._tokens: list[int] = []
        self._offset = 0                  # target tokens rendered
        self._mel = np.zeros((flow.params.mel_bins, 0), dtype=np.float32)   # target mel so far
        self._sent = 0                    # samples handed out
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

    def _next_hop(self) -> int:
        return self.schedule.hop(self.hops, self.n_prompt)

    def push(self, tokens) -> list[np.ndarray]:
        """Add target tokens; returns the audio of every hop now complete (often none)."""
        if self._finished:
            raise ParameterError("this stream is finished")
        new = check_tokens(tokens, "tokens", self.flow.params.vocab_size, allow_empty=True)
        self._tokens.extend(int(t) for t in new)
        out = []
        while len(self._tokens) - self._offset >= self._next_hop() + self.lookahead:
            end = self._offset + self._next_hop()
            out.append(self._render(end, final=False))
        return out

    def finish(self) -> np.ndarray:
        """The audio of the remaining tokens (upstream's ``finalize=True`` call); the stream ends."""
        if self._finished:
            raise ParameterError("this stream is finished")
        try:
            if len(self._tokens) == self._offset and self._mel.shape[1] == 0:
                return np.zeros(0, dtype=np.float32)
            return self._render(len(self._tokens), final=True)
        finally:
            self.close()

    def close(self) -> None:
        """End the stream (a cancel, an error, or after :meth:`finish`); what it holds is dropped."""
        self._finished = True
        self._tokens, self._mel = [], self._mel[:, :0]

    def hop_mel(self, end: int, final: bool) -> np.ndarray:
        """The flow's mel [80, frames] of target tokens [offset, end): upstream's flow call on the prompt
        and the tokens so far (with the look-ahead after ``end`` unless ``final``)."""
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
        mel = flow.solve(mu, spks, cond, self.n_timesteps, cfg_steps=self.cfg_steps)
        return mel[:, (self.n_prompt + self._offset) * ratio:]

    def _render(self, end: int, final: bool) -> np.ndarray:
        mel = self.hop_mel(end, final)
        self._mel = np.concatenate([self._mel, mel], axis=1)
        audio = self.vocoder.streamed(self._mel, finalize=final)[self._sent:]
        self._sent += audio.shape[0]
        self._offset = end
        self.hops += 1
        return audio


@dataclass
class Token2WavV3(Token2Wav):
    """CosyVoice3's token2wav: the whole-sentence path of :class:`Token2Wav`, and, where the model was
    converted with the streamed DiT graph (``stream_flow``), :meth:`stream`."""

    stream_flow: FlowDecoder | None = None
    schedule: HopSchedule = HopSchedule()

    #: The quality levers a v3 stream does not take: its left context is every chunk (no cache to
    #: bound) and its first hop is upstream's.
    can_bound_context = False
    can_shorten_first_hop = False

    @property
    def can_stream(self) -> bool:
        return self.stream_flow is not None

    def stream(self, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps: int | None = None,
               rng: np.random.Generator | None = None, cache_budget: int = 0,
               expected_tokens: int = 0, *, cfg_steps: int | None = None, left_chunks: int = 0,
               first_hop_tokens: int = 0) -> DiTStream:
        """A hop-by-hop stream for one utterance (speed 1). ``cfg_steps`` applies; ``rng``,
        ``cache_budget``, ``expected_tokens``, ``left_chunks`` and ``first_hop_tokens`` are accepted for
        :meth:`Token2Wav.stream`'s signature and not used (see :class:`DiTStream`)."""
        if self.stream_flow is None:
            raise ParameterError("this model directory has no streamed DiT graph; convert it again")
        prompt_tokens, prompt_mel, embedding, steps = self.stream_flow.checked_prompt(prompt_tokens, prompt_mel,
                                                                               speaker_embedding, n_timesteps)
        return DiTStream(self.stream_flow, self.vocoder, self.schedule, prompt_tokens, prompt_mel, embedding,
                         steps, cfg_steps)
