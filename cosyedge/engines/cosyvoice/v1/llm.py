"""CosyVoice-300M's speech LLM at run time: causal text encoder + Transformer steps on a KV cache.

Responsible for turning text ids (+ an optional prompt and speaker embedding) into speech tokens as
upstream ``TransformerLM.inference`` (@46dfe04) does: the text (prompt text first) goes through the
text encoder once; the LLM reads ``[sos, speaker(optional), encoded text, task_id, prompt speech
tokens]`` and then one token per step; end-of-speech (id 4096) is masked in the first step and below
2x the text tokens, and stops decoding after; at most 20x the text tokens (prompt text excluded).
Which token to take is delegated to a chooser (:mod:`cosyedge.engines.cosyvoice.common.sampling`).

The step graph takes, per layer, the positional projections ``linear_pos(pe(r))`` of the offsets
``r = 0 .. T-1``. They depend on the offset only, so :class:`PositionTable` computes each row once
(from the layers' ``linear_pos`` weights) and keeps it for every later step and sentence.

Two step graphs exist (the manifest's ``config.llm.step_format``; docs/models.md):

* format 2 (:class:`BufferedSteps`): the cache is one buffer per layer and kind, sized for the whole
  sentence, that the graph writes in place (bound as input and output through onnxruntime's
  IOBinding); the positional rows go in per head and channel (``[heads, head_dim, offsets]``), a
  multiple of :data:`TABLE_ROWS` offsets at a time, rebuilt only when the sequence outgrows them. A step copies nothing that grows with the sequence.
* format 1 (:class:`ConcatSteps`, models converted before format 2): the cache goes in and comes
  out whole (the graph concatenates it) and the positional rows go in position-major.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from cosyedge.engines.cosyvoice.common.llm import MAX_TOKEN_TEXT_RATIO, MIN_TOKEN_TEXT_RATIO, gather_rows, make_session
from cosyedge.engines.cosyvoice.common.sampling import Chooser
from cosyedge.errors import CancelledError, ModelMissingError, ParameterError
from cosyedge.host.heap import trim_heap

logger = logging.getLogger(__name__)

#: The step graphs this runtime reads (``config.llm.step_format``; none written: 1).
STEP_FORMATS = (1, 2)
#: Format 2's positional rows are fed in multiples of this many offsets: a new table every 64 tokens.
TABLE_ROWS = 64


@dataclass(frozen=True)
class LMConfigV1:
    """The exported LLM's shape (the manifest's ``config.llm``).

    ``input_size`` is the width of what the step graph reads (``llm_input_size``), ``hidden`` its
    layers' width; models converted before the two were told apart have one size for both.
    """

    hidden: int
    heads: int
    head_dim: int
    layers: int
    text_input: int
    speech_vocab: int
    eos: int
    input_size: int
    #: Channels per head in a format-2 cache (``head_dim`` rounded up to 8 for onnxruntime's kernel).
    cache_head_dim: int

    @classmethod
    def from_dict(cls, values: dict) -> "LMConfigV1":
        values = {"input_size": values["hidden"], "cache_head_dim": values["head_dim"], **values}
        return cls(**{k: int(values[k]) for k in cls.__dataclass_fields__})


def sinusoids(start: int, stop: int, d_model: int) -> np.ndarray:
    """ESPnet sinusoids of positions ``start .. stop-1``: [n, d_model] float32, even sin / odd cos."""
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / d_model)))
    angles = np.arange(start, stop, dtype=np.float32)[:, None] * div[None, :]
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(-1, d_model).astype(np.float32)


class PositionTable:
    """``pe(r) @ linear_pos_l.T`` for every layer l and offset r, grown as longer sequences come."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = weights                       # [layers, H, H] (out, in), float16 or float32
        self.layers, self.hidden = int(weights.shape[0]), int(weights.shape[1])
        self._rows = np.zeros((self.layers, 0, self.hidden), dtype=np.float32)
        self.length = 0

    def upto(self, total: int) -> list[np.ndarray]:
        """The first ``total`` rows of every layer (contiguous views: fed to onnxruntime without a copy)."""
        if total > self.length:
            capacity = max(total, 2 * self._rows.shape[1], 256)
            if capacity > self._rows.shape[1]:
                grown = np.zeros((self.layers, capacity, self.hidden), dtype=np.float32)
                grown[:, :self.length] = self._rows[:, :self.length]
                self._rows = grown
            pe = sinusoids(self.length, capacity, self.hidden)
            for layer in range(self.layers):
                self._rows[layer, self.length:capacity] = pe @ np.asarray(self.weights[layer], dtype=np.float32).T
            self.length = capacity
        return [self._rows[layer, :total] for layer in range(self.layers)]

    def per_head(self, rows: int, heads: int) -> list[np.ndarray]:
        """The first ``rows`` offsets of every layer as ``[1, heads, head_dim, rows]`` (a new contiguous
        array per layer: what the format-2 graph reads without a transpose)."""
        head_dim = self.hidden // heads
        return [np.ascontiguousarray(table.reshape(rows, heads, head_dim).transpose(1, 2, 0))[None]
                for table in self.upto(rows)]


class ConcatSteps:
    """One sequence on a format-1 step graph: the whole cache goes in and comes back each step."""

    def __init__(self, lm: "SpeechLMv1") -> None:
        self.lm = lm
        self.cache = lm.empty_cache()

    def __call__(self, embeds: np.ndarray) -> np.ndarray:
        logp, self.cache = self.lm.step(embeds, self.cache)
        return logp


class BufferedSteps:
    """One sequence on a format-2 step graph: the cache written in place, the positional rows per head.

    ``capacity`` is the longest sequence this run may reach (the prompt plus the most tokens the
    sentence may get); the buffers are zeroed pages the kernel maps as they are first written, so
    the unused tail costs address space, not memory. One instance per sequence: two syntheses
    share the session, each with its own buffers and binding.
    """

    def __init__(self, session, config: "LMConfigV1", positions: PositionTable, capacity: int) -> None:
        import onnxruntime as ort

        self.session, self.config, self.positions, self.capacity = session, config, positions, int(capacity)
        shape = (1, config.heads, self.capacity, config.cache_head_dim)
        self._binding = session.io_binding()
        self._binding.bind_output("logp")
        self._buffers: list = []
        for layer in range(config.layers):
            for kind in ("key", "value"):
                buffer = np.zeros(shape, dtype=np.float32)
                value = ort.OrtValue.ortvalue_from_numpy(buffer)
                self._binding.bind_ortvalue_input(f"past_{kind}_{layer}", value)
                self._binding.bind_ortvalue_output(f"present_{kind}_{layer}", value)
                self._buffers.append((buffer, value))
        self._tables: list = []
        self._feeds: tuple = ()
        self.length = 0

    def _bind_positions(self, total: int) -> None:
        rows = -(-total // TABLE_ROWS) * TABLE_ROWS
        if self._tables and self._tables[0][0].shape[3] == rows:
            return
        import onnxruntime as ort

        self._tables = []
        for layer, table in enumerate(self.positions.per_head(rows, self.config.heads)):
            value = ort.OrtValue.ortvalue_from_numpy(table)
            self._binding.bind_ortvalue_input(f"pos_table_{layer}", value)
            self._tables.append((table, value))

    def __call__(self, embeds: np.ndarray) -> np.ndarray:
        """Feed ``embeds [L, input_size]`` after what was fed before; the next token's log-probs."""
        embeds = np.ascontiguousarray(embeds, dtype=np.float32).reshape(1, -1, self.config.input_size)
        total = self.length + embeds.shape[1]
        if total > self.capacity:
            raise ValueError(f"the LLM cache holds {self.capacity} positions, not {total}")
        self._bind_positions(total)
        self._feeds = (embeds, np.array([total - 1], dtype=np.int32), np.array(total, dtype=np.int32))
        for name, array in zip(("inputs_embeds", "seqlens_k", "total_sequence_length"), self._feeds):
            self._binding.bind_cpu_input(name, array)
        self.session.run_with_iobinding(self._binding)
        self.length = total
        # a copy: the output's memory is onnxruntime's, and the next run may write it again
        return np.array(self._binding.get_outputs()[0].numpy()[0])


class SpeechLMv1:
    """``generate(text ids, prompt, speaker) -> speech tokens``; built from ready sessions and arrays."""

    def __init__(self, text_session, step_session, config: LMConfigV1, tables: dict[str, np.ndarray],
                 step_format: int = 1) -> None:
        if step_format not in STEP_FORMATS:
            raise ModelMissingError(f"this runtime reads CosyVoice-300M LLM step formats {STEP_FORMATS}, not "
                                    f"{step_format}: update cosyedge, or convert the checkpoint again")
        self.text_session = text_session
        self.step_session = step_session
        self.config = config
        self.step_format = step_format
        self.tables = tables
        self.positions = PositionTable(tables["pos_weight"])
        self._cache_names = [f"past_{kind}_{i}" for i in range(config.layers) for kind in ("key", "value")]
        self._present = [n.replace("past_", "present_") for n in self._cache_names]

    @classmethod
    def load(cls, model, threads: int = 1) -> "SpeechLMv1":
        """Open the two graphs and the memory-mapped tables a converted model lists (``config.llm``)."""
        cfg = model.config("llm")
        files = cfg.get("files", {})
        try:
            tables = {name: np.load(model.file(files[name]), mmap_mode="r")
                      for name in ("text_embedding", "text_embedding_scale", "speech_embedding",
                                   "speech_embedding_scale", "special_embedding", "pos_weight") if name in files}
            with np.load(model.file(files["speaker_affine"])) as affine:
                tables["speaker_weight"], tables["speaker_bias"] = affine["weight"], affine["bias"]
            text = make_session(model.file(files["text_encoder"]), threads)
            step = make_session(model.file(files["step"]), threads)
        except (OSError, KeyError, ValueError) as exc:
            raise ModelMissingError(f"CosyVoice-300M LLM files in {model.path} are missing or broken ({exc}); "
                                    "convert the checkpoint again with `python -m cosyedge convert cosyvoice1`") from exc
        return cls(text, step, LMConfigV1.from_dict(cfg), tables, step_format=int(cfg.get("step_format", 1)))

    # -- inputs ---------------------------------------------------------------------------------
    def _gather(self, name: str, ids: Sequence[int]) -> np.ndarray:
        return gather_rows(self.tables[name], self.tables.get(name + "_scale"), ids)

    def embed_speech(self, ids: Sequence[int]) -> np.ndarray:
        return self._gather("speech_embedding", ids)

    def encode_text(self, ids: Sequence[int]) -> np.ndarray:
        """Text ids -> the LLM's text inputs [n, input_size] (causal text encoder + affine)."""
        if not len(ids):
            return np.zeros((0, self.config.input_size), dtype=np.float32)
        embeds = self._gather("text_embedding", ids)[None]
        return self.text_session.run(None, {"embeds": embeds})[0][0]

    def speaker(self, embedding: np.ndarray) -> np.ndarray:
        """campplus embedding [192] -> the LLM's speaker input [input_size] (L2-normalised, then affine)."""
        e = np.asarray(embedding, dtype=np.float32).reshape(-1)
        e = e / max(float(np.sqrt(np.sum(e.astype(np.float64) ** 2))), 1e-12)
        return (np.asarray(self.tables["speaker_weight"], dtype=np.float32) @ e.astype(np.float32)
                + self.tables["speaker_bias"]).astype(np.float32)

    def build_prompt(self, text_ids: Sequence[int], prompt_text_ids: Sequence[int] = (),
                     prompt_speech_ids: Sequence[int] = (), embedding: np.ndarray | None = None) -> np.ndarray:
        """``[sos, speaker?, encoded(prompt text + text), task id, prompt speech]`` as [N, input_size]."""
        special = np.asarray(self.tables["special_embedding"], dtype=np.float32)
        parts = [special[0:1]]
        if embedding is not None:
            parts.append(self.speaker(embedding)[None])
        parts += [self.encode_text(list(prompt_text_ids) + list(text_ids)), special[1:2]]
        if len(prompt_speech_ids):
            parts.append(self.embed_speech(prompt_speech_ids))
        return np.concatenate(parts, axis=0).astype(np.float32)

    # -- the step graph -------------------------------------------------------------------------
    def steps(self, capacity: int) -> "BufferedSteps | ConcatSteps":
        """A fresh sequence on the step graph: call it with each input, get the next log-probs;
        ``capacity`` is the most positions it will be fed (format 2 sizes its cache from it)."""
        if self.step_format == 2:
            return BufferedSteps(self.step_session, self.config, self.positions, capacity)
        return ConcatSteps(self)

    def empty_cache(self) -> list[np.ndarray]:
        shape = (1, self.config.heads, 0, self.config.head_dim)
        return [np.zeros(shape, dtype=np.float32) for _ in self._cache_names]

    def step(self, embeds: np.ndarray, cache: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Format 1: feed ``embeds [L, input_size]`` after ``cache``; return (log-probs of the next token,
        new cache)."""
        embeds = np.ascontiguousarray(embeds, dtype=np.float32).reshape(1, -1, self.config.input_size)
        total = cache[0].shape[2] + embeds.shape[1]
        feed = {"inputs_embeds": embeds}
        for layer, rows in enumerate(self.positions.upto(total)):
            feed[f"past_key_{layer}"] = cache[2 * layer]
            feed[f"past_value_{layer}"] = cache[2 * layer + 1]
            feed[f"pos_proj_{layer}"] = rows
        out = self.step_session.run(["logp"] + self._present, feed)
        return out[0][0], out[1:]

    def generate(self, text_ids: Sequence[int], choose: Chooser, prompt_text_ids: Sequence[int] = (),
                 prompt_speech_ids: Sequence[int] = (), embedding: np.ndarray | None = None,
                 min_ratio: float = MIN_TOKEN_TEXT_RATIO, max_ratio: float = MAX_TOKEN_TEXT_RATIO,
                 cancelled: Callable[[], bool] | None = None,
                 on_step: Callable[[np.ndarray], None] | None = None) -> list[int]:
        """Speech tokens for ``text_ids``; lengths count ``text_ids`` only, as upstream does."""
        return list(self.iter_tokens(text_ids, choose, prompt_text_ids, prompt_speech_ids, embedding, min_ratio,
                                     max_ratio, cancelled, on_step))

    def iter_tokens(self, text_ids: Sequence[int], choose: Chooser, prompt_text_ids: Sequence[int] = (),
                    prompt_speech_ids: Sequence[int] = (), embedding: np.ndarray | None = None,
                    min_ratio: float = MIN_TOKEN_TEXT_RATIO, max_ratio: float = MAX_TOKEN_TEXT_RATIO,
                    cancelled: Callable[[], bool] | None = None,
                    on_step: Callable[[np.ndarray], None] | None = None) -> Iterator[int]:
        """:meth:`generate`'s tokens one at a time, as they are decoded (for streaming)."""
        if not len(text_ids):
            raise ParameterError("the text gave no tokens")
        eos = self.config.eos
        min_len, max_len = int(len(text_ids) * min_ratio), int(len(text_ids) * max_ratio)
        lm_input = self.build_prompt(text_ids, prompt_text_ids, prompt_speech_ids, embedding)
        step = self.steps(len(lm_input) + max_len)
        tokens: list[int] = []
        try:
            for i in range(max_len):
                if cancelled is not None and cancelled():
                    raise CancelledError("synthesis cancelled")
                logp = step(lm_input)
                if i == 0:  # upstream: the first step never ends the speech
                    logp = np.array(logp, copy=True)
                    logp[eos] = -np.inf
                if on_step is not None:
                    on_step(logp)
                token = int(choose(logp, tokens, i < min_len))
                if token == eos:
                    break
                tokens.append(token)
                yield token
                lm_input = self.embed_speech([token])
            logger.debug("LLM v1: %d text ids -> %d speech tokens", len(text_ids), len(tokens))
        finally:
            del step  # the sentence's cache
            trim_heap()

    def close(self) -> None:
        self.text_session = self.step_session = None
