"""Thermal governor: reads the box's temperature and says how much work may run.

Only the shared data type lives here until the operations work fills in the governor.
States: "unknown" (no sensor: no throttling), "normal", "warm" (one job at a time, fewer ONNX
threads), "hot" (new jobs wait), "critical" (new jobs refused until it cools).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ThermalSnapshot:
    """What the job queue and /health need to know right now."""

    state: str = "unknown"
    temp_c: float | None = None
    max_concurrency: int | None = None  # None: no thermal limit
    onnx_threads: int | None = None  # None: no thermal limit
    hold_new: bool = False  # "hot": new jobs wait in the queue
    refuse_new: bool = False  # "critical": new jobs are refused
    message: str = "no temperature sensor; not throttling"
