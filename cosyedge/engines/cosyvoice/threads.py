"""The one place that splits a CosyVoice model's CPU threads between the LLM and flow + HiFT.

While a sentence streams, the LLM decodes the next hop as flow + HiFT render the previous one, so the
two sets of ONNX sessions run at once. Their intra-op thread counts (fixed when a session is
opened) are chosen here from measured costs: seconds per speech token of decoding and of rendering at
1, 2, ... threads (:class:`ThreadCosts`). For each split the time per token is estimated as the larger
of the two sides' times and of the total CPU-seconds over the CPUs there are (a split may ask for more
threads than CPUs; then they share). The smallest estimate wins.

The CPU budget is the process's usable CPUs (affinity and cgroup quota, :mod:`cosyedge.cpus`), or
fewer when the thermal governor or ``onnx_threads`` says so (the service reloads the model with the
lower count). Two jobs at once share the same sessions and so the same threads.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

#: Measured on the Intel Xeon (AVX-512 VNNI, AMX) host, 2026-12-01, full-size random weights, int8
#: (docs/benchmarks.md, issue 19): LLM decode 45-52 ms per token at 1 thread, 35.7 tokens/s at 2;
#: flow + HiFT 11.5-12.5 s for 250 tokens at 2 threads (~linear in threads).
INTEL_XEON_COSTS = {"decode": {1: 0.048, 2: 0.028}, "render": {1: 0.094, 2: 0.048}}

COSTS_FILE = "thread_costs.json"


@dataclass(frozen=True)
class ThreadCosts:
    """Seconds per speech token at a given thread count, for decode and for render (flow + HiFT)."""

    decode: dict[int, float] = field(default_factory=lambda: dict(INTEL_XEON_COSTS["decode"]))
    render: dict[int, float] = field(default_factory=lambda: dict(INTEL_XEON_COSTS["render"]))
    source: str = "Intel Xeon figures (docs/benchmarks.md)"

    @classmethod
    def load(cls, model_dir: Path) -> "ThreadCosts":
        """The host's own measurement, ``thread_costs.json`` in the model directory, if there is one
        (``{"decode": {"1": s, ...}, "render": {...}}``); else the built-in figures."""
        path = Path(model_dir) / COSTS_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls({int(k): float(v) for k, v in data["decode"].items()},
                       {int(k): float(v) for k, v in data["render"].items()}, source=str(path))
        except (OSError, ValueError, KeyError, AttributeError):
            return cls()

    @staticmethod
    def at(table: dict[int, float], threads: int) -> float:
        """Cost at ``threads``: measured, or scaled from the nearest measured count (linear speed-up
        going up, which flatters only counts nobody measured)."""
        if threads in table:
            return table[threads]
        nearest = min(table, key=lambda t: abs(t - threads))
        return table[nearest] * nearest / threads


@dataclass(frozen=True)
class ThreadPlan:
    lm: int
    render: int
    seconds_per_token: float
    cpus: int

    def describe(self) -> str:
        return (f"LLM {self.lm} thread(s), flow + HiFT {self.render} on {self.cpus} CPU(s): "
                f"~{self.seconds_per_token * 1000:.0f} ms per token estimated")


def plan_threads(cpus: int, costs: ThreadCosts | None = None) -> ThreadPlan:
    """The split of ``cpus`` with the smallest estimated time per streamed token."""
    costs = costs or ThreadCosts()
    cpus = max(1, int(cpus))
    best: ThreadPlan | None = None
    for lm in range(1, cpus + 1):
        for render in range(1, cpus + 1):
            decode, rend = costs.at(costs.decode, lm), costs.at(costs.render, render)
            cpu_seconds = decode * lm + rend * render
            estimate = max(decode, rend, cpu_seconds / cpus)
            if best is None or estimate < best.seconds_per_token - 1e-12:
                best = ThreadPlan(lm, render, estimate, cpus)
    assert best is not None
    return best
