"""Thermal governor: a fake sensor walks normal -> warm -> hot -> critical -> cool."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cosyedge.host import thermal
from cosyedge.config import Settings, SettingsError
from cosyedge.host.thermal import ThermalGovernor, ThermalSnapshot, ThermalThresholds


class FakeSensor:
    """Returns the next temperature of a list on each call; the last one repeats."""

    def __init__(self, temps):
        self.temps = list(temps)
        self.calls = 0

    def __call__(self):
        value = self.temps[min(self.calls, len(self.temps) - 1)]
        self.calls += 1
        if isinstance(value, Exception):
            raise value
        return value


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def governor(temps, **kw) -> tuple[ThermalGovernor, FakeSensor]:
    sensor = FakeSensor(temps)
    gov = ThermalGovernor(sensor, ThermalThresholds(70, 80, 90, 5), base_concurrency=2,
                          base_threads=4, min_interval_s=0, **kw)
    return gov, sensor


def walk(temps):
    gov, _ = governor(temps)
    return [gov.snapshot() for _ in temps]


def test_full_cycle_follows_the_states_with_hysteresis():
    temps = [50, 69.9, 70, 79, 80, 89, 90, 95, 86, 85, 84, 76, 75, 74, 66, 65, 64, 40]
    expected = ["normal", "normal", "warm", "warm", "hot", "hot", "critical", "critical",
                "critical",  # 86 > 90-5: still critical
                "hot",  # 85 is not above 85: down to hot (85 >= 80)
                "hot", "hot",  # 84, 76 > 75: hot holds
                "warm",  # 75: not above 75
                "warm", "warm",  # 74, 66 > 65
                "normal",  # 65: not above 65
                "normal", "normal"]
    assert [s.state for s in walk(temps)] == expected


def test_what_each_state_allows():
    normal, warm, hot, critical = walk([50, 72, 82, 91])
    assert (normal.max_concurrency, normal.onnx_threads, normal.hold_new, normal.refuse_new) == \
        (None, None, False, False)
    assert warm.max_concurrency == 1 and warm.onnx_threads == 2
    assert not warm.hold_new and not warm.refuse_new
    assert hot.max_concurrency == 1 and hot.onnx_threads == 2 and hot.hold_new and not hot.refuse_new
    assert hot.message == "cooling down (82 °C)"
    assert critical.refuse_new and critical.hold_new
    assert "91 °C" in critical.message and "refused" in critical.message
    assert [s.temp_c for s in (normal, warm, hot, critical)] == [50, 72, 82, 91]


def test_rising_skips_straight_to_the_right_state():
    assert [s.state for s in walk([40, 95, 40])] == ["normal", "critical", "normal"]


def test_hovering_at_a_threshold_does_not_flap():
    states = [s.state for s in walk([80, 79, 80.5, 78, 79.9, 77])]
    assert states == ["hot"] * 6


def test_no_sensor_is_unknown_and_not_throttling():
    gov = ThermalGovernor(None, ThermalThresholds(), base_concurrency=2, base_threads=4)
    snap = gov.snapshot()
    assert snap == ThermalSnapshot()  # the default: unknown, no limits
    assert snap.state == "unknown" and snap.max_concurrency is None and not snap.hold_new
    assert "no temperature sensor" in snap.message


def test_unreadable_or_failing_sensor_is_unknown(caplog):
    snaps = walk([None, OSError("i2c timeout"), 60, float("nan"), 500])
    assert [s.state for s in snaps] == ["unknown", "unknown", "normal", "unknown", "unknown"]
    assert snaps[0].max_concurrency is None and "unreadable" in snaps[0].message
    assert snaps[3] == ThermalSnapshot(message="temperature unreadable; not throttling")


def test_unreadable_right_after_critical_keeps_refusing_for_the_hold_then_one_job_at_a_time(caplog):
    """A sensor that flickers after a critical reading must not lift the throttling: the box has
    not cooled. The state holds for stale_hold_s after the last good reading, then "unknown" keeps
    warm's limits until the sensor reads again."""
    clock = Clock()
    gov, _ = governor([93, None, OSError("i2c timeout"), None, None, 60], clock=clock, stale_hold_s=120)
    assert gov.snapshot().state == "critical"
    clock.t = 2.0
    held = gov.snapshot()
    assert (held.state, held.refuse_new, held.hold_new, held.temp_c) == ("critical", True, True, 93)
    assert "sensor unreadable for 2 s" in held.message
    clock.t = 119.0
    assert gov.snapshot().refuse_new
    clock.t = 121.0
    fallen = gov.snapshot()
    assert fallen.state == "unknown" and not fallen.refuse_new and not fallen.hold_new
    assert (fallen.max_concurrency, fallen.onnx_threads) == (1, 2)  # warm's limits, not none
    assert "unreadable for 121 s after 93 °C" in fallen.message
    clock.t = 200.0
    assert gov.snapshot().max_concurrency == 1  # until it reads again
    clock.t = 202.0
    assert gov.snapshot().state == "normal" and gov.snapshot().max_concurrency is None
    warned = [r.getMessage() for r in caplog.records if "sensor unreadable" in r.getMessage()]
    assert len(warned) == 1  # said once, not on every read


def test_unreadable_after_warm_or_hot_holds_that_state():
    for first, state in ((74, "warm"), (84, "hot")):
        clock = Clock()
        gov, _ = governor([first, None], clock=clock)
        gov.snapshot()
        clock.t = 30.0
        assert gov.snapshot().state == state and gov.snapshot().max_concurrency == 1


def test_unreadable_after_normal_throttles_nothing():
    clock = Clock()
    gov, _ = governor([55, None], clock=clock)
    gov.snapshot()
    clock.t = 3.0
    assert gov.snapshot() == ThermalSnapshot(message="temperature unreadable; not throttling")


@pytest.mark.parametrize("temps, step_s, resume", [
    ([86, 85, 84], 10.0, 90),  # 0.1 °C/s measured: 84 -> 75 in 90 s
    ([86, 81, 76.5], 10.0, 5),  # fast cooling: under the lower bound, 5 s
    ([82, 82, 82], 10.0, 70),  # not cooling (yet): the assumed 0.1 °C/s
    ([84], 0.0, 90),  # one reading: assumed
    ([95, 94, 93], 10.0, 80),  # critical ends at 85: 8 °C at 0.1 °C/s
])
def test_hot_and_critical_estimate_when_they_end_from_the_cooling(temps, step_s, resume):
    clock = Clock()
    gov, _ = governor(temps, clock=clock)
    for i in range(len(temps)):
        clock.t = i * step_s
        snap = gov.snapshot()
    assert snap.resume_in_s == pytest.approx(resume)
    assert snap.retry_after() == resume


def test_no_estimate_below_hot():
    normal, warm = walk([50, 74])
    assert normal.resume_in_s is None and warm.resume_in_s is None
    assert ThermalSnapshot().retry_after() == thermal.DEFAULT_RETRY_S


def test_a_queue_behind_a_flickering_sensor_still_refuses_after_critical():
    """The issue's case: unreadable right after a critical reading, a job was accepted at once."""
    from cosyedge.errors import BusyError
    from cosyedge.service.jobs import JobQueue

    clock = Clock()
    gov, _ = governor([93, None], clock=clock)
    queue = JobQueue(concurrency=2, max_waiting=4, thermal=gov)
    try:
        assert gov.snapshot().state == "critical"
        clock.t = 3.0
        with pytest.raises(BusyError) as refused:
            queue.submit(lambda job: None)
        assert refused.value.code == "too_hot" and refused.value.retry_after == 80
    finally:
        queue.shutdown()


def test_single_thread_box_keeps_one_thread():
    gov = ThermalGovernor(FakeSensor([75]), ThermalThresholds(), base_concurrency=1, base_threads=1,
                          min_interval_s=0)
    assert gov.snapshot().onnx_threads == 1


def test_state_changes_are_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="cosyedge.host.thermal")
    walk([50, 72, 73, 82, 83, 91, 60])
    changes = [r.getMessage() for r in caplog.records if "->" in r.getMessage()]
    assert changes == [
        "thermal: unknown -> normal: normal (50 °C)",
        "thermal: normal -> warm: warm (72 °C): one job at a time, 2 thread(s)",
        "thermal: warm -> hot: cooling down (82 °C)",
        "thermal: hot -> critical: too hot (91 °C): new jobs refused until it cools",
        "thermal: critical -> normal: normal (60 °C)",
    ]
    levels = {r.getMessage().split(":")[1].strip(): r.levelno for r in caplog.records}
    assert levels["warm -> hot"] == logging.WARNING


def test_sensor_is_read_at_most_once_per_interval():
    clock = Clock()
    sensor = FakeSensor([50, 85])
    gov = ThermalGovernor(sensor, ThermalThresholds(), 2, 4, min_interval_s=2.0, clock=clock)
    assert gov.snapshot().state == "normal"
    clock.t = 1.0
    assert gov.snapshot().state == "normal" and sensor.calls == 1
    clock.t = 2.5
    assert gov.snapshot().state == "hot" and sensor.calls == 2


def test_thresholds_come_from_settings():
    s = Settings(thermal_warm_c=60, thermal_hot_c=65, thermal_critical_c=75, thermal_hysteresis_c=2)
    gov = ThermalGovernor(FakeSensor([66]), s, 2, 2, min_interval_s=0)
    assert gov.snapshot().state == "hot"
    assert gov.update(63.5).state == "hot"  # 63.5 > 65 - 2
    assert gov.update(62.9).state == "warm"


@pytest.mark.parametrize("values", [dict(thermal_warm_c=85), dict(thermal_critical_c=75),
                                    dict(thermal_hysteresis_c=-1)])
def test_settings_reject_bad_thresholds(values):
    with pytest.raises(SettingsError, match="thermal"):
        Settings(**values).validate()


def test_sysfs_fallback_reads_the_hottest_zone(tmp_path):
    for i, milli in enumerate(["45000", "71500", "garbage"]):
        zone = tmp_path / f"thermal_zone{i}"
        zone.mkdir()
        (zone / "temp").write_text(milli + "\n")
    assert thermal.read_sysfs(tmp_path) == 71.5
    assert thermal.read_sysfs(tmp_path / "none") is None


def test_psutil_reader_prefers_cpu_groups(monkeypatch):
    import psutil
    from collections import namedtuple

    Temp = namedtuple("shwtemp", "label current high critical")
    fake = {"nvme": [Temp("Composite", 88.0, None, None)],
            "coretemp": [Temp("Package id 0", 61.0, 80, 100), Temp("Core 0", 63.0, 80, 100)]}
    monkeypatch.setattr(psutil, "sensors_temperatures", lambda: fake, raising=False)
    assert thermal.read_psutil() == 63.0
    monkeypatch.setattr(psutil, "sensors_temperatures", lambda: {"nvme": fake["nvme"]}, raising=False)
    assert thermal.read_psutil() == 88.0
    monkeypatch.setattr(psutil, "sensors_temperatures", lambda: {}, raising=False)
    assert thermal.read_psutil() is None


def test_find_sensor_falls_back_to_sysfs_then_none(monkeypatch, tmp_path):
    monkeypatch.setattr(thermal, "read_psutil", lambda: None)
    monkeypatch.setattr(thermal, "read_sysfs", lambda root=Path("x"): 55.0)
    assert thermal.find_sensor() is thermal.read_sysfs
    monkeypatch.setattr(thermal, "read_sysfs", lambda root=Path("x"): None)
    assert thermal.find_sensor() is None

