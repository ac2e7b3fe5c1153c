"""Choosing the next speech token from the LLM's log-probabilities.

A *chooser* is any callable ``(logp, decoded, ignore_eos) -> token id``: ``logp`` is the step's
log-softmax over the speech vocabulary (6561 speech tokens, then end-of-speech, then two fill tokens),
``decoded`` the speech tokens emitted so far, ``ignore_eos`` true while the minimum length is not
reached. :class:`RasSampler` is upstream CosyVoice2's repetition-aware sampling with a seedable numpy
generator; :func:`greedy` is the deterministic chooser the parity tests inject on both sides.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

Chooser = Callable[[np.ndarray, Sequence[int], bool], int]


def softmax(logp: np.ndarray) -> np.ndarray:
    """Probabilities from log-probabilities or logits (float64 for stable sums)."""
    x = np.asarray(logp, dtype=np.float64)
    x = np.exp(x - x.max())
    return x / x.sum()


class RasSampler:
    """Repetition-aware sampling (upstream ``ras_sampling``): nucleus, then a full-distribution redraw.

    1. Nucleus: sort the probabilities (stable, descending); keep tokens while the kept mass is below
       ``top_p`` and fewer than ``top_k`` are kept; draw one from the kept set, renormalised.
    2. If the drawn token occurs at least ``win_size * tau_r`` times among the last ``win_size``
       emitted tokens, draw again from the full distribution.
    While ``ignore_eos``, a draw that hits end-of-speech is repeated (upstream tries 100 times and then
    fails; here the 101st draw is made with end-of-speech masked instead of failing the request).
    """

    def __init__(self, eos: int, seed: int | None = None, top_p: float = 0.8, top_k: int = 25,
                 win_size: int = 10, tau_r: float = 0.1, max_trials: int = 100) -> None:
        self.eos = eos
        self.top_p, self.top_k, self.win_size, self.tau_r = top_p, top_k, win_size, tau_r
        self.max_trials = max_trials
        self.rng = np.random.default_rng(seed)

    def nucleus(self, probs: np.ndarray) -> int:
        # Only the top_k largest can be kept: partition, then order those stably (ties by index), as
        # upstream's full stable sort would; a full sort of 6564 costs ~1 ms per step.
        k = min(self.top_k, probs.size)
        order = np.argpartition(-probs, k - 1)[:k]
        order = order[np.lexsort((order, -probs[order]))]
        sorted_p = probs[order]
        # Token i is kept when the mass of tokens before it is < top_p (and i < top_k).
        before = np.concatenate(([0.0], np.cumsum(sorted_p)[:-1]))
        keep = int(min(self.top_k, max(1, np.count_nonzero(before < self.top_p))))
        kept = sorted_p[:keep]
        return int(order[self.rng.choice(keep, p=kept / kept.sum())])

    def full(self, probs: np.ndarray) -> int:
        return int(self.rng.choice(probs.size, p=probs))

    def draw(self, probs: np.ndarray, decoded: Sequence[int]) -> int:
        token = self.nucleus(probs)
        recent = list(decoded[-self.win_size:])
        if recent.count(token) >= self.win_size * self.tau_r:
            token = self.full(probs)
        return token

    def __call__(self, logp: np.ndarray, decoded: Sequence[int], ignore_eos: bool) -> int:
        probs = softmax(logp)
        for _ in range(self.max_trials + 1):
            token = self.draw(probs, decoded)
            if not ignore_eos or token != self.eos:
                return token
        logger.warning("end-of-speech drawn %d times before the minimum length; masking it", self.max_trials)
        masked = probs.copy()
        masked[self.eos] = 0.0
        return self.draw(masked / masked.sum(), decoded)


def greedy(eos: int, mask_fill: bool = True) -> Chooser:
    """Arg-max chooser that never picks end-of-speech (``eos``: the id masked below the minimum length)
    while ``ignore_eos``, and, with ``mask_fill`` (CosyVoice2), never a fill token above ``eos``.
    CosyVoice3 passes its masked id 6561 and ``mask_fill=False``: every id above it is a stop."""

    def choose(logp: np.ndarray, decoded: Sequence[int], ignore_eos: bool) -> int:
        scores = np.array(logp, dtype=np.float64, copy=True)
        if mask_fill:
            scores[eos + 1:] = -np.inf
        if ignore_eos:
            scores[eos] = -np.inf
        return int(np.argmax(scores))

    return choose
