"""What an answer in a speed mode says of the check (service.mode_notes), what the page shows of it
(web.mode_check_panel), and `models list` / `GET /models`' verdict lines."""

from __future__ import annotations

import argparse

from cosyedge.catalog.mode_verdicts import read_record, write_record
from cosyedge.commands.models import run_list, verdict_line
from cosyedge.service.mode_notes import check_note
from cosyedge.web.mode_check_panel import NOT_CHECKED, STALE, describe, label_verdict
from tests.test_service_mode_check import make_cosyvoice_folder

FIGURES = {"similarity": 0.934, "min_similarity": 0.9, "intelligibility_exact": 96.0, "intelligibility_mode": 95.0,
           "intelligibility_delta": -1.0, "duration_ratio": 1.0, "mel_distance_db": 2.5, "languages": {},
           "not_scored": []}


def record(folder, recommended: bool = True):
    write_record(folder, {
        "finished": "2026-12-05T21:00:00+00:00", "voice": {"kind": "preset", "id": "中文女", "name": "中文女"},
        "judge": "campplus", "exact": {"heard_errors": 4, "units": 100},
        "modes": {"live": {"figures": FIGURES, "render_seconds": 12.0,
                           "verdict": {"recommended": recommended, "failed": [] if recommended else ["similarity_low"]}}}})
    return read_record(folder)


def test_an_answer_names_the_date_figures_verdict_and_voice(tmp_path):
    folder = make_cosyvoice_folder(tmp_path)
    record(folder)
    note = check_note(folder, "m", "live", ("preset", "中文女"))
    assert note.code == "quality_checked"
    assert str(note) == ("quality live: checked on this model on 2026-12-05 with preset 中文女: similarity 0.93, "
                         "intelligibility -1.0 points; recommended on this model")
    other = check_note(folder, "m", "live", ("saved", "ms-li"))
    assert "(not this answer's voice)" in str(other) and other.params["same_voice"] is False
    assert check_note(folder, "m", "exact", ("preset", "中文女")) is None


def test_an_answer_says_not_checked_without_a_current_record(tmp_path):
    folder = make_cosyvoice_folder(tmp_path)
    note = check_note(folder, "m", "balanced", None)
    assert note.code == "quality_not_checked" and "not checked on this model" in str(note)
    record(folder)
    assert check_note(folder, "m", "balanced", None).code == "quality_not_checked"  # that mode was not checked
    make_cosyvoice_folder(tmp_path, converter="cosyedge 0.2.0")  # converted again
    summary = read_record(folder).summary()
    assert summary["stale"] and not summary["modes"]["live"]["recommended"], "a stale record vouches for nothing"
    stale = check_note(folder, "m", "live", None)
    assert stale.code == "quality_not_checked" and "earlier conversion" in str(stale) and stale.params["stale"]


def test_the_page_shows_each_mode_its_verdict_and_a_stale_record(tmp_path):
    folder = make_cosyvoice_folder(tmp_path)
    idle = {"status": {"state": "idle", "progress": {"done": 0, "total": 0, "step": ""}}, "result": None}
    assert NOT_CHECKED in describe(idle)
    data = record(folder, recommended=False).data
    text = describe({**idle, "result": data, "current": True})
    assert "| live | not recommended" in text and "中文女" in text and "96.0 %" in text
    assert STALE in describe({**idle, "result": data, "current": False})
    running = {"status": {"state": "running", "progress": {"done": 3, "total": 54, "step": "rendering live"}},
               "result": None}
    assert "rendering live (3/54)" in describe(running)
    assert "recommended on this model" in label_verdict("live", {"recommended": True, "stale": False})
    assert "not checked" in label_verdict("live", None)
    assert "outdated" in label_verdict("live", {"recommended": True, "stale": True})


def test_models_list_prints_the_verdicts(tmp_path, capsys):
    folder = make_cosyvoice_folder(tmp_path / "models")
    rec = record(folder)
    assert verdict_line(rec.summary()) == ("live recommended (similarity 0.93, intelligibility -1.0 points) "
                                          "(checked 2026-12-05 with preset 中文女)")
    args = argparse.Namespace(models_dir=tmp_path / "models", model=folder.name)
    assert run_list(args) == 0
    assert "speed modes: live recommended" in capsys.readouterr().out


def test_a_write_cut_off_midway_leaves_the_record_whole_and_the_next_write_tidies(tmp_path):
    from cosyedge.catalog.mode_verdicts import PARTIAL_SUFFIX, RESULT_NAME
    from cosyedge.files import TEMP_PREFIX

    folder = make_cosyvoice_folder(tmp_path)
    before = record(folder).data
    half = folder / f"{TEMP_PREFIX}killed{PARTIAL_SUFFIX}"
    half.write_text('{"format": 1, "modes": {"li')  # what a process killed while writing leaves
    assert read_record(folder).data == before
    record(folder, recommended=False)
    assert not half.exists() and [p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX)] == []
    assert (folder / RESULT_NAME).is_file()
