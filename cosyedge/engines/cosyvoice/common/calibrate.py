"""Measure, on this host, what a speech token costs the LLM and flow + HiFT at 1, 2, ... threads.

The thread split (:mod:`cosyedge.engines.cosyvoice.common.threads`) needs these costs, and they differ by CPU
(docs/benchmarks.md: an AMD EPYC and an Intel Xeon host balance differently), so they are measured
where the model runs: once per host and model, when the engine first loads there, and stored in
the model directory (``thread_costs.json``, keyed by :func:`~cosyedge.engines.cosyvoice.common.threads.host_key`).

Each thread count opens its own sessions (onnxruntime fixes a session's threads when it opens it),
runs once to warm them, then times:

* decode: :data:`DECODE_STEPS` LLM steps after a short prefill (forced tokens), per step;
* render: one 25-token hop of the streamed flow (its Euler steps at the model's count) and its HiFT,
  per token (a whole 25-token sentence for a model without streaming graphs). As in a real sentence a
  voice prompt comes first (:data:`PROMPT_TOKENS`, 4 s) and the timed hop is the second, so its chunk
  attends to 250 earlier frames: each chunk's attention grows with the frames before it (about 45 %
  of an estimator call at 300 earlier frames with the chunk-blocked cache, docs/benchmarks.md), so a
  hop at the start of an empty stream would understate a sentence's rendering by a third or more.

At full size this takes about 15-25 s on a 2-core box; the tiny test model a fraction of a second.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

import numpy as np

from cosyedge.engines.cosyvoice.common.threads import ThreadCosts

logger = logging.getLogger(__name__)

DECODE_STEPS = 12
#: Speech tokens for the render measurement: a first (warm-up) chunk with its look-ahead, then a hop.
HOP = 25
#: The voice prompt ahead of the render measurement's tokens (speech tokens, 25 a second).
PROMPT_TOKENS = 100


def thread_counts(cpus: int) -> list[int]:
    """The counts worth measuring on ``cpus`` CPUs: 1, 2, 4, ... and ``cpus`` itself."""
    counts, n = {max(1, int(cpus))}, 1
    while n < cpus:
        counts.add(n)
        n *= 2
    return sorted(counts)


def decode_seconds(lm, steps: int = DECODE_STEPS) -> float:
    """Seconds per LLM decode step (after the prefill) of ``lm``, a :class:`SpeechLM`."""
    forced = iter(np.random.default_rng(0).integers(0, 6561, steps + 1).tolist())
    stamps: list[float] = []
    text = list(range(100, 108))
    lm.generate(text, lambda *_: next(forced), min_ratio=0, max_ratio=(steps + 0.5) / len(text),
                on_step=lambda _: stamps.append(time.perf_counter()))
    if len(stamps) < 2:
        raise RuntimeError(f"the LLM made {len(stamps)} step(s); cannot time its decode")
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def render_seconds(token2wav) -> float:
    """Seconds per speech token of one streamed hop (flow chunk + HiFT) of ``token2wav``; of a
    whole 25-token sentence where the model has no streaming graphs."""
    rng = np.random.default_rng(0)
    empty, embedding = np.zeros(0, dtype=np.int64), np.zeros(192, dtype=np.float32)
    if not getattr(token2wav, "can_stream", False):
        tokens = rng.integers(0, 6561, HOP)
        token2wav(tokens, empty, None, embedding, rng=rng)  # warm-up
        t0 = time.perf_counter()
        token2wav(tokens, empty, None, embedding, rng=rng)
        return (time.perf_counter() - t0) / HOP
    prompt = rng.integers(0, 6561, PROMPT_TOKENS)
    prompt_mel = (rng.standard_normal((2 * PROMPT_TOKENS, 80)) - 4).astype(np.float32)
    stream = token2wav.stream(prompt, prompt_mel, embedding, rng=rng)
    lookahead = stream.lookahead
    tokens = rng.integers(0, 6561, 3 * HOP + lookahead)
    stream.push(tokens[:HOP + lookahead])  # the prompt's chunks and the first hop warm the sessions up
    first = stream.tokens_rendered
    t0 = time.perf_counter()
    hops = stream.push(tokens[HOP + lookahead:])  # the next hop(s): 25 tokens each (v2) or 50 (v3)
    seconds = time.perf_counter() - t0
    if not hops:
        raise RuntimeError("the streamed flow gave no hop; cannot time its rendering")
    return seconds / (stream.tokens_rendered - first)


def measure_thread_costs(open_lm: Callable[[int], object], open_token2wav: Callable[[int], object],
                         counts: Iterable[int]) -> ThreadCosts:
    """Decode and render costs at each thread count, from sessions opened by the two callables
    (``threads -> SpeechLM`` / ``threads -> Token2Wav``); each is closed before the next opens."""
    decode: dict[int, float] = {}
    render: dict[int, float] = {}
    for threads in counts:
        lm = open_lm(threads)
        try:
            decode_seconds(lm, steps=2)  # warm-up
            decode[threads] = round(decode_seconds(lm), 5)
        finally:
            close = getattr(lm, "close", None)
            if close is not None:
                close()
        del lm
        t2w = open_token2wav(threads)
        render[threads] = round(render_seconds(t2w), 5)
        del t2w
        logger.info("measured at %d thread(s): decode %.1f ms, render %.1f ms per token", threads,
                    decode[threads] * 1000, render[threads] * 1000)
    return ThreadCosts(decode, render, source="measured on this host")


def host_costs(model_dir, open_lm: Callable[[int], object], open_token2wav: Callable[[int], object],
               measure: bool = True) -> ThreadCosts:
    """This host's costs for the model in ``model_dir``: stored, else measured now and stored (when
    ``measure``), else the built-in figures. A failed measurement or a read-only directory only
    costs the measurement (logged), never the load."""
    from cosyedge.host.cpus import usable_cpus

    costs = ThreadCosts.load(model_dir)
    if costs.measured or not measure:
        return costs
    logger.info("measuring this host's LLM / flow + HiFT thread costs (once per host and model)")
    t0 = time.perf_counter()
    try:
        measured = measure_thread_costs(open_lm, open_token2wav, thread_counts(usable_cpus()))
    except Exception:  # the built-in figures still give a working split
        logger.warning("thread cost measurement failed; using the built-in figures", exc_info=True)
        return costs
    seconds = round(time.perf_counter() - t0, 1)
    try:
        path = measured.save(model_dir, measured=time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                             seconds=seconds)
        logger.info("thread costs measured in %.1f s, stored in %s", seconds, path)
    except OSError as exc:
        logger.warning("thread costs measured in %.1f s but not stored (%s); measuring again next load",
                       seconds, exc)
    return measured
