"""CosyVoice2's speech LLM at run time: embedding gathers on the host, one ONNX step graph, a KV cache.

Responsible for turning text ids (+ an optional prompt) into speech tokens, exactly as upstream
``Qwen2LM.inference`` does: input layout ``[sos, text(prompt_text + text), task_id, prompt speech
tokens]``, one forward per step with ordinary causal attention over the whole cache, minimum and
maximum lengths of 2x and 20x the text tokens (prompt text excluded), end-of-speech stops, a fill
token (after the first step) re-feeds the same input. Which token to take is delegated to a chooser (see ``sampling``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from cosyedge.engines.cosyvoice.common.sampling import Chooser
from cosyedge.errors import CancelledError, ModelMissingError
from cosyedge.host.heap import trim_heap

logger = logging.getLogger(__name__)

MIN_TOKEN_TEXT_RATIO = 2.0
MAX_TOKEN_TEXT_RATIO = 20.0


@dataclass(frozen=True)
class LLMConfig:
    """What the runtime needs to know about the exported graph (from ``llm_config.json``)."""

    hidden: int
    layers: int
    kv_heads: int
    head_dim: int
    speech_vocab: int
    eos: int
    #: CosyVoice3: every id from here on ends the speech (None: CosyVoice2's eos + fill tokens).
    stop_from: int | None = None
    #: The id masked while the minimum length is not reached (None: ``eos``; CosyVoice3: 6561, its sos).
    min_len_masked: int | None = None

    @property
    def masked_id(self) -> int:
        """The id a chooser must not pick below the minimum length (upstream's ``speech_token_size``)."""
        return self.eos if self.min_len_masked is None else self.min_len_masked

    @classmethod
    def from_json(cls, data: dict) -> "LLMConfig":
        dims = data["dims"]
        optional = {k: int(data[k]) for k in ("stop_from", "min_len_masked") if data.get(k) is not None}
        return cls(hidden=int(dims["hidden"]), layers=int(dims["layers"]), kv_heads=int(dims["kv_heads"]),
                   head_dim=int(data["head_dim"]), speech_vocab=int(data["speech_vocab"]), eos=int(data["eos"]),
                   **optional)


def gather_rows(table: np.ndarray, scale: np.ndarray | None, ids: Sequence[int]) -> np.ndarray:
    """Rows ``ids`` of a (possibly int8 + per-row scale) table as float32 ``[n, hidden]``."""
    idx = np.asarray(ids, dtype=np.int64).reshape(-1)
    rows = np.asarray(table[idx], dtype=np.float32)
    if scale is not None:
        rows *= np.asarray(scale[idx], dtype=np.float32)[:, None]
    return rows


def make_session(path: Path, threads: int):
    """An onnxruntime CPU session with all graph optimizations and ``threads`` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


class SpeechLM:
    """Qwen2 speech-token LM: ``generate(text ids, prompt) -> speech tokens``.

    Built from ready objects (a session and arrays) so tests can hand it anything with ``run``;
    :meth:`load` does the file work.
    """

    def __init__(self, session, config: LLMConfig, text_table: np.ndarray, text_scale: np.ndarray | None,
                 speech_embedding: np.ndarray, special_embedding: np.ndarray,
                 speech_scale: np.ndarray | None = None) -> None:
        self.session = session
        self.config = config
        self.text_table = text_table  # int8 codes (with per-row ``text_scale``), float16 or float32
        self.text_scale = text_scale
        self.speech_embedding = speech_embedding  # int8 codes (with per-row ``speech_scale``) or float
        self.speech_scale = speech_scale
        self.special_embedding = special_embedding
        self._cache_names = [f"past_{kind}_{i}" for i in range(config.layers) for kind in ("key", "value")]
        self._present_names = [n.replace("past_", "present_") for n in self._cache_names]

    @classmethod
    def load(cls, directory: Path, threads: int = 1) -> "SpeechLM":
        """Open ``llm_config.json``, ``llm.onnx`` and the memory-mapped tables in ``directory``."""
        directory = Path(directory)
        config_path = directory / "llm_config.json"
        try:
            raw = json.loads(config_path.read_text(encoding="utf-8"))
            files = raw["files"]
            config = LLMConfig.from_json(raw)
            tables = {name: np.load(directory / files[name], mmap_mode="r")
                      for name in ("text_embedding", "text_embedding_scale", "speech_embedding",
                                   "speech_embedding_scale", "special_embedding") if name in files}
            session = make_session(directory / files["llm"], threads)
        except (OSError, KeyError, ValueError) as exc:
            raise ModelMissingError(f"CosyVoice LLM files in {directory} are missing or broken ({exc}); "
                                    "convert the checkpoint again with `python -m cosyedge convert cosyvoice2`") from exc
        return cls(session, config, tables["text_embedding"], tables.get("text_embedding_scale"),
                   tables["speech_embedding"], tables["special_embedding"], tables.get("speech_embedding_scale"))

    # -- embeddings (host-side gathers) -------------------------------------------------------
    def embed_text(self, ids: Sequence[int]) -> np.ndarray:
        return gather_rows(self.text_table, self.text_scale, ids)

    def embed_speech(self, ids: Sequence[int]) -> np.ndarray:
        return gather_rows(self.speech_embedding, self.speech_scale, ids)

    def build_prompt(self, text_ids: Sequence[int], prompt_text_ids: Sequence[int] = (),
                     prompt_speech_ids: Sequence[int] = ()) -> np.ndarray:
        """``[sos, text(prompt_text + text), task_id, prompt speech]`` as ``[N, hidden]`` float32."""
        parts = [self.special_embedding[0:1], self.embed_text(list(prompt_text_ids) + list(text_ids)),
                 self.special_embedding[1:2]]
        if len(prompt_speech_ids):
            parts.append(self.embed_speech(prompt_speech_ids))
        return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=0)

    # -- the step graph ------------------------------------------------------------------------
    def empty_cache(self) -> list[np.ndarray]:
        shape = (1, self.config.kv_heads, 0, self.config.head_dim)
        return [np.zeros(shape, dtype=np.float32) for _ in self._cache_names]

    def step(self, embeds: np.ndarray, cache: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Feed ``embeds [L, hidden]`` after ``cache``; return (log-probs of the next token, new cache)."""
        feed = {"inputs_embeds": np.ascontiguousarray(embeds, dtype=np.float32).reshape(1, -1, self.config.hidden)}
        feed.update(zip(self._cache_names, cache))
        out = self.session.run(["logp"] + self._present_names, feed)
        return out[0][0], out[1:]

    def generate(self, text_ids: Sequence[int], choose: Chooser, prompt_text_ids: Sequence[int] = (),
                 prompt_speech_ids: Sequence[int] = (), min_ratio: float = MIN_TOKEN_TEXT_RATIO,
                 max_ratio: float = MAX_TOKEN_TEXT_RATIO, cancelled: Callable[[], bool] | None = None,
                 on_step: Callable[[np.ndarray], None] | None = None) -> list[int]:
        """Speech tokens for ``text_ids``; lengths count ``text_ids`` only, as upstream does."""
        return list(self.iter_tokens(text_ids, choose, prompt_text_ids, prompt_speech_ids, min_ratio,
                                     max_ratio, cancelled, on_step))

    def iter_tokens(self, text_ids: Sequence[int], choose: Chooser, prompt_text_ids: Sequence[int] = (),
                    prompt_speech_ids: Sequence[int] = (), min_ratio: float = MIN_TOKEN_TEXT_RATIO,
                    max_ratio: float = MAX_TOKEN_TEXT_RATIO, cancelled: Callable[[], bool] | None = None,
                    on_step: Callable[[np.ndarray], None] | None = None) -> Iterator[int]:
        """:meth:`generate`'s tokens one at a time, as they are decoded (for streaming)."""
        eos = self.config.eos
        stop_from = self.config.stop_from
        min_len = int(len(text_ids) * min_ratio)
        max_len = int(len(text_ids) * max_ratio)
        lm_input = self.build_prompt(text_ids, prompt_text_ids, prompt_speech_ids)
        cache = self.empty_cache()
        tokens: list[int] = []
        for i in range(max_len):
            if cancelled is not None and cancelled():
                raise CancelledError("synthesis cancelled")
            logp, cache = self.step(lm_input, cache)
            if on_step is not None:
                on_step(logp)
            token = int(choose(logp, tokens, i < min_len))
            if stop_from is not None:  # CosyVoice3: any of the extra outputs ends decoding
                if token >= stop_from:
                    break
                tokens.append(token)
                yield token
                lm_input = self.embed_speech([token])
                continue
            if token > eos and i == 0:
                # Upstream would re-feed the whole prompt into a cache that already holds it (and
                # crash on the mask); choose again among speech tokens and end-of-speech instead.
                masked = np.array(logp, copy=True)
                masked[eos + 1:] = -np.inf
                token = int(choose(masked, tokens, i < min_len))
            if token == eos:
                break
            if token > eos:  # a fill token: upstream feeds the same input again and emits nothing
                continue
            tokens.append(token)
            yield token
            lm_input = self.embed_speech([token])
        logger.debug("LLM: %d text ids -> %d speech tokens", len(text_ids), len(tokens))
        trim_heap()  # the prefill's and the cache's freed buffers

    def close(self) -> None:
        self.session = None
