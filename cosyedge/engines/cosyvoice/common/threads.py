"""The one place that splits a CosyVoice model's CPU threads between the LLM and flow + HiFT.

While a sentence streams, the LLM decodes the next hop as flow + HiFT render the previous one, so the
two sets of ONNX sessions run at once. Their intra-op thread counts (fixed when a session is
opened) are chosen here from measured costs: seconds per speech token of decoding and of rendering at
1, 2, ... threads (:class:`ThreadCosts`). For each split the time per token is estimated as the larger
of the two sides' times and of the total CPU-seconds over the CPUs there are (a split may ask for more
threads than CPUs; then they share). The smallest estimate wins.

The CPU budget is the process's usable CPUs (affinity and cgroup quota, :mod:`cosyedge.host.cpus`), or
fewer when the thermal governor or ``onnx_threads`` says so (the service reloads the model with the
lower count). Two jobs at once share the same sessions and so the same threads, and so does a
request that is not streamed (the LLM first, then flow + HiFT, each alone on the CPUs). The plan is
chosen for one streamed job; among splits estimated alike it takes one that does not ask for more
threads than CPUs (the estimate leaves out memory bandwidth, which the LLM's decoding and the
stream's caches both need: on the Intel host LLM 2 + render 1 streamed 8-15 % slower than 1 + 1,
docs/bench-log/cosyvoice.md), then the faster one for a request not streamed, then for two jobs, and states
both estimates.

The costs are this host's own where they were measured (:mod:`cosyedge.engines.cosyvoice.common.calibrate`,
once per host and model, kept in the model directory's ``thread_costs.json`` under the host's key:
CPU model, usable CPUs, onnxruntime version); else the built-in Intel Xeon figures.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

#: Measured on the Intel Xeon (AVX-512 VNNI, AMX) host, 2026-12-01, full-size random weights, int8
#: (docs/bench-log/cosyvoice.md, issue 19): LLM decode 45-52 ms per token at 1 thread, 35.7 tokens/s at 2;
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
    def load(cls, model_dir: Path, host: str | None = None) -> "ThreadCosts":
        """This host's measurement from ``thread_costs.json`` in the model directory, if there is one
        (``{"hosts": {host key: {"decode": {"1": s, ...}, "render": {...}}}}``; top-level ``decode`` /
        ``render`` are a hand-written table for any host); else the built-in figures."""
        path = Path(model_dir) / COSTS_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entry = data.get("hosts", {}).get(host or host_key()) or data
            return cls({int(k): float(v) for k, v in entry["decode"].items()},
                       {int(k): float(v) for k, v in entry["render"].items()}, source=str(path))
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            return cls()

    @property
    def measured(self) -> bool:
        """False for the built-in figures (no measurement of this host was found)."""
        return self.source != ThreadCosts.__dataclass_fields__["source"].default

    def save(self, model_dir: Path, host: str | None = None, **about) -> Path:
        """Store these costs for ``host`` (default: this one) in the model directory's costs file,
        keeping other hosts' entries; written atomically. ``about``: what the entry also records."""
        path = Path(model_dir) / COSTS_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        hosts = data.setdefault("hosts", {})
        hosts[host or host_key()] = {"decode": {str(k): v for k, v in sorted(self.decode.items())},
                                     "render": {str(k): v for k, v in sorted(self.render.items())}, **about}
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, path)
        return path

    @staticmethod
    def at(table: dict[int, float], threads: int) -> float:
        """Cost at ``threads``: measured, or scaled from the nearest measured count (linear speed-up
        going up, which flatters only counts nobody measured)."""
        if threads in table:
            return table[threads]
        nearest = min(table, key=lambda t: abs(t - threads))
        return table[nearest] * nearest / threads


def host_key() -> str:
    """What makes one host's costs another's: the CPU model, the usable CPUs, the onnxruntime version."""
    from cosyedge.host.cpus import usable_cpus

    try:
        import onnxruntime
        runtime = onnxruntime.__version__
    except ImportError:  # pragma: no cover - the app always has it
        runtime = "?"
    return f"{cpu_model()} / {usable_cpus()} CPUs / onnxruntime {runtime}"


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo (``lscpu``'s Model name), or the platform's word for it."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclass(frozen=True)
class ThreadPlan:
    lm: int
    render: int
    seconds_per_token: float
    cpus: int
    seconds_per_token_two_jobs: float = 0.0  # per job, two jobs at once on the same sessions
    seconds_per_token_not_streamed: float = 0.0  # the LLM, then flow + HiFT
    source: str = ""

    def describe(self) -> str:
        return (f"LLM {self.lm} thread(s), flow + HiFT {self.render} on {self.cpus} CPU(s): "
                f"~{self.seconds_per_token * 1000:.0f} ms per token estimated streamed "
                f"(~{self.seconds_per_token_not_streamed * 1000:.0f} ms not streamed, "
                f"~{self.seconds_per_token_two_jobs * 1000:.0f} ms per job with two jobs; costs: {self.source})")


def estimate(costs: ThreadCosts, lm: int, render: int, cpus: int, jobs: int = 1) -> float:
    """Seconds per streamed token, per job, of ``jobs`` jobs on an ``lm`` / ``render`` split of ``cpus``:
    the slower side, or the CPU-seconds all jobs need over the CPUs, whichever is more."""
    decode, rend = costs.at(costs.decode, lm), costs.at(costs.render, render)
    cpu_seconds = jobs * (decode * lm + rend * render)
    return max(decode, rend, cpu_seconds / cpus)


def not_streamed(costs: ThreadCosts, lm: int, render: int) -> float:
    """Seconds per token of a request that is not streamed: decoding, then rendering."""
    return costs.at(costs.decode, lm) + costs.at(costs.render, render)


def plan_threads(cpus: int, costs: ThreadCosts | None = None) -> ThreadPlan:
    """The split of ``cpus`` with the smallest estimated time per streamed token for one job (ties: one
    within the CPUs, then the better one not streamed, then for two jobs), with at most one thread more
    than ``cpus``."""
    costs = costs or ThreadCosts()
    cpus = max(1, int(cpus))
    best: tuple | None = None
    for lm in range(1, cpus + 1):
        for render in range(1, cpus + 1):
            if lm + render > cpus + 1:  # more would spin against each other (counts nobody measured)
                continue
            key = (round(estimate(costs, lm, render, cpus), 12), lm + render > cpus,
                   round(not_streamed(costs, lm, render), 12), estimate(costs, lm, render, cpus, jobs=2), lm, render)
            if best is None or key[:4] < best[:4]:
                best = key
    assert best is not None
    one, _, sequential, two, lm, render = best
    return ThreadPlan(lm, render, one, cpus, two, sequential, costs.source)
