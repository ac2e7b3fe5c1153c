"""The ``quality`` setting: named bundles of the flow's speed levers, defined here and nowhere else.

A CosyVoice answer costs the LLM's decode plus the flow (Euler steps x estimator calls, CFG doubling
each call's batch) and HiFT. Four training-free levers trade the flow's fidelity to upstream for time
and memory; a mode names one setting of all four, so a request, the server default
(``COSYEDGE_QUALITY``), the page and issue 32's check speak of the same thing:

* ``flow_steps``: Euler steps on the cosine schedule (upstream: 10). A request's explicit
  ``flow_steps`` wins over the mode's.
* ``cfg_steps``: the steps that run classifier-free guidance (a batch-2 estimator call mixed
  ``(1 + r) v_cond - r v_uncond``); the others run the conditional row alone (batch 1). ``None``:
  every step (upstream); ``0``: none; ``k``: the first ``k``.
* ``left_chunks``: how many earlier 50-frame chunks a streamed chunk's estimator attention still sees
  (0 = all, upstream). The key/value cache keeps only those, so a streamed sentence's memory stops
  growing with its length. Streaming only, and only on models whose streaming graphs read the
  chunk-blocked cache (``flow.stream.kv_layout``).
* ``first_hop_tokens``: the first streamed hop's length in speech tokens (0 = upstream's 25 + the
  padding that ends the prompt's last chunk). A shorter first hop is rendered from the partial chunk
  (as upstream's flow renders a hop that ends inside a chunk); its chunk is rendered again whole for
  the next hop. Streaming only. Counted in CosyVoice2's tokens (:data:`MODE_TOKEN_RATE` a second): a
  model with another token rate takes the same length of audio (:func:`first_hop_at`).

Not every lever means something on every model: an engine applies those its model can
(``quality_levers``) and names the others with the reason (``inapplicable_levers``; CosyVoice-300M's
flow is not chunk-causal, so it has no left context to bound); the answer's note says both.

No mode but ``exact`` was heard on real weights (none are to be had here): each is a named choice,
never the default, and issue 32's check judges them on the user's own model. Their deviation from
exact on random weights is in docs/models.md ("Quality modes").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Collection

from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)

#: Upstream CosyVoice's flow-matching steps (``flow.inference`` hard-codes 10); the most a request may ask.
UPSTREAM_FLOW_STEPS = 10
#: The longest first hop: upstream's hop (a shorter first hop is the lever; a longer one never helps).
MAX_FIRST_HOP_TOKENS = 25
#: The shortest first hop: HiFT holds back 8 mel frames (4 tokens) of every hop for its cross-fade.
MIN_FIRST_HOP_TOKENS = 5
#: The most earlier chunks a bound may name (50 frames = 1 s each; more is as good as unbounded).
MAX_LEFT_CHUNKS = 60
#: The mode every request gets unless it or the server names another: upstream's semantics.
DEFAULT_QUALITY = "exact"
#: The speech tokens a second that ``first_hop_tokens`` counts (CosyVoice2's and Fun-CosyVoice3's).
MODE_TOKEN_RATE = 25
#: Each lever in the words of :meth:`Levers.describe` when a model has no use for it.
LEVER_WORDS = {"flow_steps": "flow steps", "cfg_steps": "the CFG schedule", "left_chunks": "left context",
               "first_hop_tokens": "first hop length"}


@dataclass(frozen=True)
class Levers:
    """One setting of the four levers (see the module docstring); the defaults are upstream's
    (``flow_steps`` None: the model's own count, upstream's 10)."""

    flow_steps: int | None = None
    cfg_steps: int | None = None
    left_chunks: int = 0
    first_hop_tokens: int = 0

    @property
    def steps(self) -> int:
        """The Euler steps run (the model's own count taken as upstream's)."""
        return UPSTREAM_FLOW_STEPS if self.flow_steps is None else self.flow_steps

    @property
    def guided_steps(self) -> int:
        """How many of the steps run CFG."""
        return self.steps if self.cfg_steps is None else min(self.cfg_steps, self.steps)

    def changed(self) -> tuple[str, ...]:
        """The names of the levers set away from upstream's, in the module docstring's order."""
        names = []
        if self.steps != UPSTREAM_FLOW_STEPS:
            names.append("flow_steps")
        if self.guided_steps != self.steps:
            names.append("cfg_steps")
        if self.left_chunks:
            names.append("left_chunks")
        if self.first_hop_tokens:
            names.append("first_hop_tokens")
        return tuple(names)

    def describe(self, leave_out: Collection[str] = ()) -> str:
        """The levers in words, e.g. ``4 flow steps, no CFG, 4 chunks of left context, first hop 10 tokens``;
        the levers named in ``leave_out`` (those a model has no use for) are not mentioned."""
        guided = self.guided_steps
        cfg = ("CFG on every step" if guided == self.steps else "no CFG" if guided == 0
               else f"CFG on the first {guided} of them")
        parts = {"flow_steps": f"{self.steps} flow steps", "cfg_steps": cfg,
                 "left_chunks": f"{self.left_chunks} chunks of left context" if self.left_chunks
                 else "all left context",
                 "first_hop_tokens": f"first hop {self.first_hop_tokens} tokens" if self.first_hop_tokens
                 else "upstream's first hop"}
        return ", ".join(words for name, words in parts.items() if name not in leave_out)

    def check(self) -> "Levers":
        """Self when every lever is within its range; a coded ParameterError naming it otherwise."""
        if self.flow_steps is not None and (isinstance(self.flow_steps, bool) or not isinstance(self.flow_steps, int)
                                            or not 1 <= self.flow_steps <= UPSTREAM_FLOW_STEPS):
            raise ParameterError(f"flow_steps must be a whole number 1-{UPSTREAM_FLOW_STEPS}, got {self.flow_steps!r}",
                                 code="flow_steps_out_of_range", steps=self.flow_steps)
        _in_range("cfg_steps", self.cfg_steps, 0, UPSTREAM_FLOW_STEPS, none_ok=True)
        _in_range("left_chunks", self.left_chunks, 0, MAX_LEFT_CHUNKS)
        if self.first_hop_tokens:
            _in_range("first_hop_tokens", self.first_hop_tokens, MIN_FIRST_HOP_TOKENS, MAX_FIRST_HOP_TOKENS)
        return self


def _in_range(name: str, value: object, low: int, high: int, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        allowed = f"{low}-{high}" + (" or none" if none_ok else "")
        raise ParameterError(f"{name} must be a whole number {allowed}, got {value!r}", code="quality_lever_out_of_range",
                             lever=name, value=value, low=low, high=high)


@dataclass(frozen=True)
class QualityMode:
    """A named setting of the levers and one line saying what it is for."""

    name: str
    levers: Levers
    summary: str


#: Every mode, in the order the page lists them. ``exact`` is upstream; the others are starting points
#: chosen from the cost model in docs/models.md ("Quality modes"), not from listening.
MODES: dict[str, QualityMode] = {mode.name: mode for mode in (
    QualityMode("exact", Levers(), "upstream's semantics: the model's 10 flow steps with CFG on each, all "
                "left context, upstream's hops"),
    QualityMode("balanced", Levers(flow_steps=6, cfg_steps=2, left_chunks=6, first_hop_tokens=15),
                "about 2.5x less flow work than exact; memory bounded by 6 s of left context"),
    QualityMode("live", Levers(flow_steps=4, cfg_steps=0, left_chunks=4, first_hop_tokens=10),
                "about 5x less flow work than exact, so the LLM sets the pace; a short first hop"),
)}
#: The names a request, the server default and the page may use.
QUALITY_NAMES: tuple[str, ...] = tuple(MODES)


def check_quality(name: object) -> str:
    """``name`` when it names a mode; a ParameterError (``quality_unknown``) listing them otherwise."""
    if not isinstance(name, str) or name not in MODES:
        raise ParameterError(f"quality {name!r} must be one of {', '.join(QUALITY_NAMES)}", code="quality_unknown",
                             quality=name, choices=QUALITY_NAMES)
    return name


def first_hop_at(tokens: int, token_rate: int) -> int:
    """A mode's ``first_hop_tokens`` (at :data:`MODE_TOKEN_RATE`) in the tokens of a model that makes
    ``token_rate`` a second: the same length of audio (0, upstream's hop, stays 0)."""
    return round(tokens * token_rate / MODE_TOKEN_RATE)


def levers_for(name: str | None, flow_steps: int | None = None) -> Levers:
    """The levers of mode ``name`` (None: :data:`DEFAULT_QUALITY`), with ``flow_steps`` in place of the
    mode's steps when given (a request's explicit count wins); checked."""
    mode = MODES[check_quality(DEFAULT_QUALITY if name is None else name)]
    levers = mode.levers if flow_steps is None else replace(mode.levers, flow_steps=flow_steps)
    return levers.check()
