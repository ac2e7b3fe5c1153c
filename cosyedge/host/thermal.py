"""Thermal governor: reads the box's temperature and says how much work may run.

States, from cool to hot: "normal" (no limits), "warm" (one job at a time, fewer ONNX threads),
"hot" (new jobs wait: "cooling down"), "critical" (new jobs refused until it cools). Running jobs
always finish. With no sensor the state is "unknown" and nothing is throttled, and the snapshot
says so. The state rises as soon as a threshold is reached and falls only after the temperature
has dropped ``hysteresis_c`` below it, so a box hovering at a threshold does not flap.

The sensor is any callable returning °C (or None when it cannot read); :func:`find_sensor` picks
``psutil.sensors_temperatures()`` and falls back to ``/sys/class/thermal/thermal_zone*/temp``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cosyedge.config import Settings

logger = logging.getLogger(__name__)

#: Returns the temperature in °C, or None when it cannot be read right now.
Sensor = Callable[[], "float | None"]

LEVELS = ("normal", "warm", "hot", "critical")
#: psutil sensor groups that describe the CPU/SoC, preferred over disks and Wi-Fi when present.
CPU_SENSOR_GROUPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal",
                     "soc-thermal", "bigcore0_thermal", "bigcore1_thermal", "littlecore_thermal",
                     "center_thermal", "package_thermal", "acpitz")
SYSFS_THERMAL = Path("/sys/class/thermal")
PLAUSIBLE_C = (-40.0, 150.0)


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


@dataclass(frozen=True)
class ThermalThresholds:
    """Where the states begin (°C) and how far below a threshold the box must cool to step down."""

    warm_c: float = 70.0
    hot_c: float = 80.0
    critical_c: float = 90.0
    hysteresis_c: float = 5.0

    @classmethod
    def from_settings(cls, settings: Settings) -> "ThermalThresholds":
        return cls(settings.thermal_warm_c, settings.thermal_hot_c, settings.thermal_critical_c,
                   settings.thermal_hysteresis_c)

    def __post_init__(self) -> None:
        if not self.warm_c < self.hot_c < self.critical_c:
            raise ValueError(f"thresholds must rise: {self.warm_c} < {self.hot_c} < {self.critical_c}")
        if self.hysteresis_c < 0:
            raise ValueError("hysteresis must be >= 0")

    def start_of(self, level: int) -> float:
        """The temperature at which ``LEVELS[level]`` begins (level >= 1)."""
        return (self.warm_c, self.hot_c, self.critical_c)[level - 1]


def _plausible(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if PLAUSIBLE_C[0] < value < PLAUSIBLE_C[1] else None


def read_psutil() -> float | None:
    """Hottest CPU/SoC reading from psutil (any group if none is a known CPU group), or None."""
    try:
        import psutil

        groups = psutil.sensors_temperatures() if hasattr(psutil, "sensors_temperatures") else {}
    except Exception as exc:  # psutil raises odd errors on odd kernels; no reading is the answer
        logger.debug("psutil sensors failed: %s", exc)
        return None
    if not groups:
        return None
    preferred = [name for name in groups if name.lower() in CPU_SENSOR_GROUPS]
    readings = [_plausible(entry.current) for name in (preferred or list(groups))
                for entry in groups[name]]
    readings = [r for r in readings if r is not None]
    return max(readings) if readings else None


def read_sysfs(root: Path = SYSFS_THERMAL) -> float | None:
    """Hottest ``thermal_zone*/temp`` (millidegrees) under ``root``, or None."""
    readings = []
    for temp_file in sorted(Path(root).glob("thermal_zone*/temp")):
        try:
            readings.append(_plausible(int(temp_file.read_text().strip()) / 1000.0))
        except (OSError, ValueError):
            continue
    readings = [r for r in readings if r is not None]
    return max(readings) if readings else None


def find_sensor() -> Sensor | None:
    """The first source that gives a reading now (psutil, then sysfs), or None: no sensor."""
    for name, sensor in (("psutil", read_psutil), ("sysfs", read_sysfs)):
        value = sensor()
        if value is not None:
            logger.info("thermal: using %s sensor (%.0f °C now)", name, value)
            return sensor
    logger.info("thermal: no temperature sensor found; not throttling")
    return None


class ThermalGovernor:
    """Turns temperature readings into a :class:`ThermalSnapshot` for the job queue and /health.

    ``snapshot()`` is cheap and thread-safe: it reads the sensor at most every ``min_interval_s``
    seconds and otherwise returns the last answer. ``update(temp)`` applies one reading (tests).
    """

    def __init__(self, sensor: Sensor | None, thresholds: Settings | ThermalThresholds | None = None,
                 base_concurrency: int = 2, base_threads: int = 1, min_interval_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(thresholds, Settings):
            thresholds = ThermalThresholds.from_settings(thresholds)
        self.thresholds = thresholds or ThermalThresholds()
        self.sensor = sensor
        self.base_concurrency = max(1, base_concurrency)
        self.base_threads = max(1, base_threads)
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._level: int | None = None  # index into LEVELS; None = unknown
        self._temp: float | None = None
        self._read_at: float | None = None
        self._snap = ThermalSnapshot()

    @classmethod
    def from_settings(cls, settings: Settings, sensor: Sensor | None = None) -> "ThermalGovernor":
        """A governor for the real box: the given sensor, else whatever :func:`find_sensor` finds."""
        return cls(sensor if sensor is not None else find_sensor(), settings,
                   settings.concurrency, settings.threads)

    @property
    def state(self) -> str:
        return self._snap.state

    def snapshot(self) -> ThermalSnapshot:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self.min_interval_s:
                self._read_at = now
                self._apply(self._read())
            return self._snap

    def update(self, temp_c: float | None) -> ThermalSnapshot:
        """Apply one reading now (bypasses the sensor and the read interval)."""
        with self._lock:
            self._apply(_plausible(temp_c))
            return self._snap

    def _read(self) -> float | None:
        if self.sensor is None:
            return None
        try:
            return _plausible(self.sensor())
        except Exception as exc:  # a flaky sensor means "unknown", never a crash
            logger.warning("thermal: sensor failed: %s", exc)
            return None

    def _next_level(self, temp: float) -> int:
        t = self.thresholds
        raw = sum(temp >= t.start_of(level) for level in (1, 2, 3))
        current = self._level if self._level is not None else 0
        if raw >= current:
            return raw
        # Cooling: step down only to the highest level whose threshold minus hysteresis is still below.
        held = max((level for level in (1, 2, 3) if temp > t.start_of(level) - t.hysteresis_c),
                   default=0)
        return max(raw, min(held, current))

    def _apply(self, temp: float | None) -> None:
        old_state = self._snap.state
        self._temp = temp
        self._level = None if temp is None else self._next_level(temp)
        self._snap = self._build()
        if self._snap.state != old_state:
            log = logger.warning if self._snap.state in ("hot", "critical") else logger.info
            log("thermal: %s -> %s: %s", old_state, self._snap.state, self._snap.message)

    def _build(self) -> ThermalSnapshot:
        temp = self._temp
        if self._level is None:
            message = ("no temperature sensor; not throttling" if self.sensor is None
                       else "temperature unreadable; not throttling")
            return ThermalSnapshot(message=message)
        deg = f"{temp:.0f} °C"
        fewer = max(1, self.base_threads // 2)
        state = LEVELS[self._level]
        if state == "normal":
            return ThermalSnapshot("normal", temp, message=f"normal ({deg})")
        if state == "warm":
            return ThermalSnapshot("warm", temp, max_concurrency=1, onnx_threads=fewer,
                                   message=f"warm ({deg}): one job at a time, {fewer} thread(s)")
        if state == "hot":
            return ThermalSnapshot("hot", temp, max_concurrency=1, onnx_threads=fewer, hold_new=True,
                                   message=f"cooling down ({deg})")
        return ThermalSnapshot("critical", temp, max_concurrency=1, onnx_threads=fewer, hold_new=True,
                               refuse_new=True,
                               message=f"too hot ({deg}): new jobs refused until it cools")
