"""Thermal governor: reads the box's temperature and says how much work may run.

States, from cool to hot: "normal" (no limits), "warm" (one job at a time, fewer ONNX threads),
"hot" (new jobs wait: "cooling down"), "critical" (new jobs refused until it cools). Running jobs
always finish. With no sensor the state is "unknown" and nothing is throttled, and the snapshot
says so. The state rises as soon as a threshold is reached and falls only after the temperature
has dropped ``hysteresis_c`` below it, so a box hovering at a threshold does not flap.

A sensor that stops answering after a warm, hot or critical reading fails safe: a box does not cool
because its sensor flickers, so the last state holds for ``stale_hold_s`` (:data:`STALE_HOLD_S`)
after the last good reading; then the state is "unknown" with warm's limits (one job at a time,
fewer threads) until the sensor reads again. While hot or critical, the snapshot estimates when the
state will end (``resume_in_s``) from the cooling measured over the last readings, so a refused client
is told to come back when the box will have cooled, not when the queue would have moved.

The sensor is any callable returning °C (or None when it cannot read); :func:`find_sensor` picks
``psutil.sensors_temperatures()`` and falls back to ``/sys/class/thermal/thermal_zone*/temp``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
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
#: How long (s) an unreadable sensor keeps the last warm/hot/critical state before "unknown".
STALE_HOLD_S = 120.0
#: Readings (s back) the cooling rate is measured over.
COOLING_WINDOW_S = 60.0
#: Cooling (°C/s) assumed while none is measured (too few readings, or not cooling yet): a small
#: passively cooled board with its jobs held loses a few degrees a minute.
ASSUMED_COOLING_C_PER_S = 0.1
#: Bounds (s) of the time-to-cool estimate a refused client is given.
RESUME_BOUNDS_S = (5.0, 600.0)
#: Retry-After (s) for a heat refusal whose snapshot carries no estimate.
DEFAULT_RETRY_S = 60


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
    #: "hot"/"critical": estimated seconds until the box has cooled out of this state
    resume_in_s: float | None = None

    def retry_after(self) -> int:
        """Whole seconds a client refused for the heat should wait: the cooling estimate."""
        return DEFAULT_RETRY_S if self.resume_in_s is None else math.ceil(self.resume_in_s)


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
                 clock: Callable[[], float] = time.monotonic, stale_hold_s: float = STALE_HOLD_S) -> None:
        if isinstance(thresholds, Settings):
            thresholds = ThermalThresholds.from_settings(thresholds)
        self.thresholds = thresholds or ThermalThresholds()
        self.sensor = sensor
        self.base_concurrency = max(1, base_concurrency)
        self.base_threads = max(1, base_threads)
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self.stale_hold_s = stale_hold_s
        self._level: int | None = None  # index into LEVELS of the last good reading; None: none yet
        self._temp: float | None = None  # the last good reading
        self._good_at: float | None = None  # when it was taken
        self._readings: deque[tuple[float, float]] = deque()  # (time, °C) of the last COOLING_WINDOW_S
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
        now = self._clock()
        old_state, old_message = self._snap.state, self._snap.message
        if temp is not None:
            self._level = self._next_level(temp)
            self._temp, self._good_at = temp, now
            self._readings.append((now, temp))
            while now - self._readings[0][0] > COOLING_WINDOW_S:
                self._readings.popleft()
        self._snap = self._build(now, readable=temp is not None)
        if self._snap.state != old_state:
            log = logger.warning if self._snap.state in ("hot", "critical") else logger.info
            log("thermal: %s -> %s: %s", old_state, self._snap.state, self._snap.message)
        elif temp is None and self._level and "unreadable" not in old_message:
            logger.warning("thermal: %s", self._snap.message)

    def cooling_rate(self) -> float | None:
        """°C per second the box has cooled over the last readings (least squares over
        :data:`COOLING_WINDOW_S`); None with fewer than two readings 5 s apart, or when it is not
        cooling."""
        if len(self._readings) < 2 or self._readings[-1][0] - self._readings[0][0] < 5.0:
            return None
        n = len(self._readings)
        mean_t = sum(t for t, _ in self._readings) / n
        mean_c = sum(c for _, c in self._readings) / n
        var = sum((t - mean_t) ** 2 for t, _ in self._readings)
        slope = sum((t - mean_t) * (c - mean_c) for t, c in self._readings) / var
        return -slope if -slope > 1e-3 else None

    def _resume_in(self) -> float | None:
        """Seconds until the box leaves the hot or critical state: until it is ``hysteresis_c``
        below that state's threshold, at the measured cooling rate (or the assumed one)."""
        if self._level is None or self._level < 2 or self._temp is None:
            return None
        target = self.thresholds.start_of(self._level) - self.thresholds.hysteresis_c
        rate = self.cooling_rate() or ASSUMED_COOLING_C_PER_S
        low, high = RESUME_BOUNDS_S
        return min(high, max(low, (self._temp - target) / rate))

    def _build(self, now: float, readable: bool) -> ThermalSnapshot:
        temp = self._temp
        if self._level is None or (not readable and self._level == 0):
            message = ("no temperature sensor; not throttling" if self.sensor is None
                       else "temperature unreadable; not throttling")
            return ThermalSnapshot(message=message)
        fewer = max(1, self.base_threads // 2)
        state = LEVELS[self._level]
        deg = f"{temp:.0f} °C"
        stale = ""
        if not readable:
            age = now - (self._good_at if self._good_at is not None else now)
            if age >= self.stale_hold_s:
                return ThermalSnapshot(max_concurrency=1, onnx_threads=fewer,
                                       message=f"temperature unreadable for {age:.0f} s after {deg} ({state}): "
                                               "one job at a time until it reads again")
            stale = f"; sensor unreadable for {age:.0f} s, {state} kept for up to {self.stale_hold_s:.0f} s"
        if state == "normal":
            return ThermalSnapshot("normal", temp, message=f"normal ({deg})")
        if state == "warm":
            return ThermalSnapshot("warm", temp, max_concurrency=1, onnx_threads=fewer,
                                   message=f"warm ({deg}): one job at a time, {fewer} thread(s){stale}")
        if state == "hot":
            return ThermalSnapshot("hot", temp, max_concurrency=1, onnx_threads=fewer, hold_new=True,
                                   message=f"cooling down ({deg}){stale}", resume_in_s=self._resume_in())
        return ThermalSnapshot("critical", temp, max_concurrency=1, onnx_threads=fewer, hold_new=True,
                               refuse_new=True, resume_in_s=self._resume_in(),
                               message=f"too hot ({deg}): new jobs refused until it cools{stale}")
