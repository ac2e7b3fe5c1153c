"""How many CPUs this process may really use: its affinity mask and its cgroup's CPU quota.

``os.cpu_count()`` counts the host's CPUs; a container or a ``taskset`` sees fewer. Thread counts
are sized from :func:`usable_cpus` instead.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The cgroup's CPU quota in CPUs (v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` / ``period``); None
    when unlimited or unreadable."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max" and float(period) > 0:
            return float(quota) / float(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = float((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = float((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """CPUs in this process's affinity mask, capped by the cgroup quota (rounded up), at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        count = min(count, max(1, math.ceil(limit - 1e-9)))
    return max(1, count)
