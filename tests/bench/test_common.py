"""bench/common.py: a round goes to the lab log under its own heading and older rounds stay; the
current-figures page is refused before a bench runs; machine and load read as the tables print them."""

from __future__ import annotations

import argparse
import datetime as dt
import re

import pytest

from bench import common

STARTED = dt.datetime(2026, 12, 3, 10, 15, tzinfo=dt.timezone.utc)


def test_a_round_is_appended_under_its_own_heading_and_older_rounds_stay(tmp_path, capsys):
    log = tmp_path / "kokoro.md"
    log.write_text("# Kokoro: lab log\n\n## Engine\n\nround 1: RTF 0.160\n", encoding="utf-8")
    title = common.record_round(log, "Engine", "engine", STARTED, "round 2: RTF 0.150\n", "the RTF rows")
    text = log.read_text(encoding="utf-8")
    assert title == "Engine: `engine`, run of 2026-12-03 10:15 UTC"
    assert text.index("round 1: RTF 0.160") < text.index(f"## {title}") < text.index("round 2: RTF 0.150")
    assert "the RTF rows" in capsys.readouterr().err


def test_the_current_page_is_refused(tmp_path):
    with pytest.raises(ValueError):
        common.record_round(common.CURRENT, "Engine", "engine", STARTED, "body", "rows")
    parser = argparse.ArgumentParser()
    common.add_write_option(parser, common.LOG_DIR / "kokoro.md")
    assert parser.parse_args(["--write"]).write == common.LOG_DIR / "kokoro.md"
    assert parser.parse_args(["--write", str(tmp_path / "x.md")]).write == tmp_path / "x.md"
    assert parser.parse_args([]).write is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--write", str(common.CURRENT)])


def test_machine_and_load_read_as_tables_print_them():
    assert re.fullmatch(r"\d+\.\d\d/\d+\.\d\d/\d+\.\d\d", common.load_average())
    assert common.cpu_model() and "logical CPUs" in common.machine()
    assert set(common.machine_info()) == {"cpu", "flags", "cpus", "date", "loadavg"}
    assert common.peak_rss_mb() > 10
    assert 1024 <= common.free_port() <= 65535
