"""Janitor: age, size and count policies on real files with real mtimes (os.utime)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from cosyedge.config import Settings
from cosyedge.ops.janitor import Janitor, JanitorPolicy, sweep

NOW = 1_800_000_000.0
HOUR = 3600.0


def make(path: Path, age_s: float, size: int = 100) -> Path:
    """A file of ``size`` bytes whose mtime is ``age_s`` before NOW."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (NOW - age_s, NOW - age_s))
    return path


def names(paths) -> set[str]:
    return {Path(p).name for p in paths}


def left(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


NO_LIMITS = JanitorPolicy(max_age_s=0, max_total_bytes=0, max_files=0, min_age_s=0)


def test_age_policy_removes_old_outputs_with_their_sidecars(tmp_path):
    out = tmp_path / "outputs"
    make(out / "old.wav", 25 * HOUR)
    make(out / "old.json", 25 * HOUR)
    make(out / "new.wav", 1 * HOUR)
    make(out / "new.json", 1 * HOUR)
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=24 * HOUR))
    assert names(removed) == {"old.wav", "old.json"}
    assert left(out) == {"new.wav", "new.json"}


def test_a_sidecar_keeps_its_audio_alive_while_either_is_young(tmp_path):
    out = tmp_path / "outputs"
    make(out / "job.wav", 30 * HOUR)
    make(out / "job.json", 2 * HOUR)  # rewritten recently: the job is young
    assert sweep(out, NOW, JanitorPolicy(max_age_s=24 * HOUR)) == []
    assert left(out) == {"job.wav", "job.json"}


def test_size_policy_removes_oldest_first_until_under_the_limit(tmp_path):
    out = tmp_path / "outputs"
    for i, age in enumerate([5, 4, 3, 2, 1]):  # a0 oldest ... a4 newest, 1000 bytes each
        make(out / f"a{i}.wav", age * HOUR, size=1000)
    policy = JanitorPolicy(max_age_s=0, max_total_bytes=2500, max_files=0)
    removed = sweep(out, NOW, policy)
    assert names(removed) == {"a0.wav", "a1.wav", "a2.wav"}
    assert left(out) == {"a3.wav", "a4.wav"}
    assert sum(p.stat().st_size for p in out.iterdir()) <= 2500


def test_size_counts_sidecars_and_removes_them_together(tmp_path):
    out = tmp_path / "outputs"
    make(out / "a.wav", 3 * HOUR, size=1000)
    make(out / "a.json", 3 * HOUR, size=600)
    make(out / "b.wav", 2 * HOUR, size=1000)
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=0, max_total_bytes=1500, max_files=0))
    assert names(removed) == {"a.wav", "a.json"}
    assert left(out) == {"b.wav"}


def test_count_policy_counts_outputs_not_files(tmp_path):
    out = tmp_path / "outputs"
    for i in range(6):
        make(out / f"j{i}.wav", (10 - i) * HOUR)
        make(out / f"j{i}.json", (10 - i) * HOUR)
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=0, max_total_bytes=0, max_files=4))
    assert names(removed) == {"j0.wav", "j0.json", "j1.wav", "j1.json"}
    assert len(left(out)) == 8


def test_in_use_files_survive_every_policy(tmp_path):
    out = tmp_path / "outputs"
    busy = make(out / "busy.wav", 48 * HOUR, size=5000)  # old and big: first in line
    make(out / "busy.json", 48 * HOUR)
    make(out / "other.wav", 30 * HOUR, size=5000)
    make(out / "fresh.wav", 3 * HOUR, size=5000)
    policy = JanitorPolicy(max_age_s=24 * HOUR, max_total_bytes=6000, max_files=1)
    removed = sweep(out, NOW, policy, in_use=frozenset({busy}))
    assert names(removed) == {"other.wav", "fresh.wav"}
    assert left(out) == {"busy.wav", "busy.json"}  # the sidecar stays with its busy audio


def test_in_use_paths_match_through_relative_paths(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    make(out / "dl.wav", 48 * HOUR)
    monkeypatch.chdir(tmp_path)
    assert sweep(Path("outputs"), NOW, JanitorPolicy(), in_use={Path("outputs/dl.wav")}) == []
    assert left(out) == {"dl.wav"}


def test_fresh_outputs_survive_size_pressure(tmp_path):
    out = tmp_path / "outputs"
    make(out / "old.wav", 2 * HOUR, size=1000)
    make(out / "just-written.wav", 10, size=1000)
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=0, max_total_bytes=500, min_age_s=120))
    assert names(removed) == {"old.wav"}
    assert left(out) == {"just-written.wav"}


def test_outputs_dated_in_the_future_do_not_escape_the_size_and_count_limits(tmp_path):
    """A box whose clock ran a year ahead (no RTC, set by hand) and was then put right: what it wrote
    meanwhile is dated in the future. Those outputs are not "written in the last two minutes", so the
    size and count limits must still reach them (last, after the dated ones); the age limit cannot."""
    out = tmp_path / "outputs"
    for i in range(3):
        make(out / f"ahead{i}.wav", -365 * 24 * HOUR - i, size=1000)  # mtime a year after NOW
    make(out / "old.wav", 2 * HOUR, size=1000)
    make(out / "just-written.wav", -10, size=1000)  # 10 s ahead: a small skew is still fresh
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=24 * HOUR, max_total_bytes=2500, max_files=0))
    assert names(removed) == {"old.wav", "ahead0.wav", "ahead1.wav"}
    assert left(out) == {"ahead2.wav", "just-written.wav"}
    assert sweep(out, NOW, JanitorPolicy(max_age_s=24 * HOUR, max_total_bytes=0, max_files=0)) == []


def test_saved_voices_and_models_survive_even_inside_outputs(tmp_path):
    root = tmp_path
    out = root / "outputs"
    prompts = root / "prompts"
    make(prompts / "teacher.wav", 100 * HOUR)
    make(prompts / "teacher.json", 100 * HOUR)
    make(root / "models" / "kokoro-int8" / "model.onnx", 100 * HOUR)
    make(out / "old.wav", 100 * HOUR)
    # a link in outputs pointing at a saved voice: left alone, and the voice never goes
    (out / "linked.wav").symlink_to(prompts / "teacher.wav")
    os.utime(out / "linked.wav", (NOW - 100 * HOUR,) * 2, follow_symlinks=False)
    settings = Settings(root=root)
    policy = JanitorPolicy.from_settings(settings)
    sweep(out, NOW, policy)
    assert (prompts / "teacher.wav").read_bytes() == b"x" * 100
    assert (prompts / "teacher.json").exists()
    assert (root / "models" / "kokoro-int8" / "model.onnx").exists()
    assert left(out) == {"linked.wav"}
    # pointed at a protected directory by mistake, the sweep refuses to touch it
    assert sweep(prompts, NOW, policy) == []
    assert sweep(root / "models" / "kokoro-int8", NOW, policy) == []
    assert (prompts / "teacher.wav").exists()
    assert (root / "models" / "kokoro-int8" / "model.onnx").exists()


def test_only_output_files_are_touched(tmp_path):
    out = tmp_path / "outputs"
    make(out / "README.md", 1000 * HOUR)
    make(out / "notes.txt", 1000 * HOUR)
    make(out / ".gitkeep", 1000 * HOUR)
    make(out / "sub" / "deep.wav", 1000 * HOUR)
    make(out / "old.wav", 1000 * HOUR)
    assert names(sweep(out, NOW, JanitorPolicy())) == {"old.wav"}
    assert left(out) == {"README.md", "notes.txt", ".gitkeep", "sub"}
    assert (out / "sub" / "deep.wav").exists()


def test_stale_temp_files_go_after_the_grace_period(tmp_path):
    out = tmp_path / "outputs"
    make(out / ".tmp-abandoned.wav", 2 * HOUR)
    make(out / ".tmp-writing.wav", 60)
    removed = sweep(out, NOW, JanitorPolicy(tmp_grace_s=HOUR))
    assert names(removed) == {".tmp-abandoned.wav"}
    assert left(out) == {".tmp-writing.wav"}


def test_unremovable_file_is_skipped_and_the_sweep_goes_on(tmp_path, monkeypatch, caplog):
    out = tmp_path / "outputs"
    for name in ("a.wav", "b.wav", "c.wav"):
        make(out / name, 48 * HOUR)
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        if self.name == "b.wav":
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    removed = sweep(out, NOW, JanitorPolicy())
    assert names(removed) == {"a.wav", "c.wav"}
    assert left(out) == {"b.wav"}
    assert "cannot remove" in caplog.text and "b.wav" in caplog.text


def test_unreadable_entry_is_skipped(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    make(out / "a.wav", 48 * HOUR)
    make(out / "b.wav", 48 * HOUR)
    real_scandir = os.scandir

    class Entry:
        def __init__(self, entry):
            self.real, self.name, self.path = entry, entry.name, entry.path

        def stat(self, follow_symlinks=True):
            if self.name == "a.wav":
                raise OSError(5, "Input/output error")
            return self.real.stat(follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "scandir", lambda p: [Entry(e) for e in real_scandir(p)])
    assert names(sweep(out, NOW, JanitorPolicy())) == {"b.wav"}
    assert left(out) == {"a.wav"}


def test_dry_run_removes_nothing(tmp_path):
    out = tmp_path / "outputs"
    make(out / "old.wav", 48 * HOUR)
    assert names(sweep(out, NOW, JanitorPolicy(), dry_run=True)) == {"old.wav"}
    assert left(out) == {"old.wav"}


def test_missing_directory_is_not_an_error(tmp_path):
    assert sweep(tmp_path / "nope", NOW, JanitorPolicy()) == []


def test_no_limits_removes_nothing(tmp_path):
    out = tmp_path / "outputs"
    make(out / "a.wav", 1000 * HOUR, size=10_000)
    assert sweep(out, NOW, NO_LIMITS) == []


def test_policy_from_settings():
    s = Settings(root=Path("/box"), janitor_max_age_hours=2, janitor_max_total_mb=1.5,
                 janitor_max_files=7)
    p = JanitorPolicy.from_settings(s)
    assert p.max_age_s == 7200 and p.max_total_bytes == 1572864 and p.max_files == 7
    assert Path("/box/prompts") in p.protected and Path("/box/models") in p.protected


def test_janitor_thread_sweeps_at_start_and_on_interval_and_stops(tmp_path):
    out = tmp_path / "outputs"
    make(out / "old.wav", 48 * HOUR)
    calls = []

    def in_use():
        calls.append(threading.current_thread().name)
        return {out / "kept.wav"}

    make(out / "kept.wav", 48 * HOUR)
    jan = Janitor(out, JanitorPolicy(), interval_s=0.05, in_use=in_use, clock=lambda: NOW).start()
    try:
        deadline = time.monotonic() + 10
        while jan.sweeps < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert jan.sweeps >= 3
        assert jan.running and calls[0] == "cosyedge-janitor"
        assert left(out) == {"kept.wav"}
        make(out / "later.wav", 48 * HOUR)  # appears after start: a later tick removes it
        deadline = time.monotonic() + 10
        while (out / "later.wav").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not (out / "later.wav").exists()
    finally:
        jan.stop()
    assert not jan.running
    assert not any(t.name == "cosyedge-janitor" for t in threading.enumerate())


def test_janitor_thread_survives_a_failing_sweep(tmp_path):
    out = tmp_path / "outputs"
    boom = {"n": 0}

    def in_use():
        boom["n"] += 1
        if boom["n"] == 1:
            raise RuntimeError("service not ready")
        return set()

    jan = Janitor(out, JanitorPolicy(), interval_s=0.02, in_use=in_use).start()
    try:
        deadline = time.monotonic() + 10
        while jan.sweeps < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert jan.sweeps >= 2 and jan.running
    finally:
        jan.stop()


def test_janitor_start_runs_the_first_sweep_without_waiting_an_interval(tmp_path):
    out = tmp_path / "outputs"
    make(out / "old.wav", 48 * HOUR)
    jan = Janitor(out, JanitorPolicy(), interval_s=3600, clock=lambda: NOW).start()
    try:
        deadline = time.monotonic() + 10
        while jan.sweeps < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not (out / "old.wav").exists()
    finally:
        t0 = time.monotonic()
        jan.stop()
        assert time.monotonic() - t0 < 2  # stop does not wait out the hour


@pytest.mark.parametrize("field,value", [("janitor_max_age_hours", -1), ("janitor_max_files", -2),
                                         ("janitor_interval_minutes", 0)])
def test_settings_reject_bad_janitor_values(field, value):
    from cosyedge.config import SettingsError

    with pytest.raises(SettingsError, match=field):
        Settings(**{field: value}).validate()


def test_sweep_command_dry_run_then_real(tmp_path, capsys):
    from cosyedge import cli

    out = tmp_path / "outputs"
    now = time.time()
    for name, age in (("old.wav", 48 * HOUR), ("old.json", 48 * HOUR), ("new.wav", HOUR)):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(b"x")
        os.utime(out / name, (now - age, now - age))
    assert cli.main(["sweep", "--dry-run", "--outputs-dir", str(out)]) == 0
    text = capsys.readouterr().out
    assert "would remove 2 file(s)" in text and "old.wav" in text and "new.wav" not in text
    assert left(out) == {"old.wav", "old.json", "new.wav"}
    assert cli.main(["sweep", "--outputs-dir", str(out)]) == 0
    assert "removed 2 file(s)" in capsys.readouterr().out
    assert left(out) == {"new.wav"}


# --- the page's upload cache (sweep_uploads) ------------------------------------------------------

from cosyedge.ops.janitor import UploadPolicy, sweep_uploads  # noqa: E402


def upload(cache: Path, name: str, age_s: float, size: int = 100) -> Path:
    """One Gradio upload: ``<cache>/<hash>/<file>``, its folder and file ``age_s`` old."""
    path = make(cache / name / "prompt.wav", age_s, size)
    os.utime(path.parent, (NOW - age_s, NOW - age_s))
    return path


def test_the_upload_cache_is_kept_under_its_cap_oldest_first(tmp_path):
    cache = tmp_path / "gradio"
    for i, age in enumerate([500, 400, 300, 200, 100]):
        upload(cache, f"u{i}", age, size=1000)
    removed = sweep_uploads(cache, NOW, UploadPolicy(max_total_bytes=2500))
    assert names(removed) == {"u0", "u1", "u2"}
    assert left(cache) == {"u3", "u4"}


def test_a_prompt_in_use_survives_the_cap_and_a_younger_one_goes_instead(tmp_path):
    cache = tmp_path / "gradio"
    kept = upload(cache, "old-in-use", 900, size=1000)
    for i, age in enumerate([300, 200, 100]):
        upload(cache, f"u{i}", age, size=1000)
    removed = sweep_uploads(cache, NOW, UploadPolicy(max_total_bytes=2500), in_use={kept})
    assert names(removed) == {"u0", "u1"}
    assert kept.exists()


def test_an_upload_still_arriving_is_counted_but_kept_until_its_grace(tmp_path):
    cache = tmp_path / "gradio"
    make(cache / "tmpabc123", 5, size=3000)  # Gradio's temp file of an upload in progress
    make(cache / "tmpstale99", 2 * HOUR, size=10)
    upload(cache, "u0", 100, size=1000)
    removed = sweep_uploads(cache, NOW, UploadPolicy(max_total_bytes=3500, partial_grace_s=600))
    assert names(removed) == {"tmpstale99", "u0"}
    assert left(cache) == {"tmpabc123"}


def test_the_entry_cap_bounds_many_tiny_uploads(tmp_path):
    cache = tmp_path / "gradio"
    for i in range(10):
        upload(cache, f"u{i:02d}", 1000 - i, size=1)
    sweep_uploads(cache, NOW, UploadPolicy(max_total_bytes=0, max_entries=4))
    assert left(cache) == {"u06", "u07", "u08", "u09"}


def test_an_upload_cache_overlapping_a_protected_folder_is_not_swept(tmp_path):
    upload(tmp_path / "prompts" / "library", "voice", 900, size=1000)
    policy = UploadPolicy(max_total_bytes=1, protected=(tmp_path / "prompts",))
    assert sweep_uploads(tmp_path / "prompts" / "library", NOW, policy) == []
    assert sweep_uploads(tmp_path, NOW, policy) == []  # prompts/ lies inside it
    assert (tmp_path / "prompts" / "library" / "voice" / "prompt.wav").exists()


def test_a_link_in_the_cache_is_removed_as_a_link(tmp_path):
    cache = tmp_path / "gradio"
    precious = make(tmp_path / "elsewhere" / "keep.wav", 0, size=5000)
    (cache / "u0").mkdir(parents=True)
    (cache / "u0" / "link.wav").symlink_to(precious)
    upload(cache, "u1", 10, size=2000)
    os.utime(cache / "u0", (NOW - 900, NOW - 900))
    sweep_uploads(cache, NOW, UploadPolicy(max_total_bytes=1000))
    assert precious.exists() and precious.stat().st_size == 5000


def test_the_janitor_sweeps_the_upload_cache_with_outputs(tmp_path):
    cache = tmp_path / "gradio"
    for i, age in enumerate([300, 200, 100]):
        upload(cache, f"u{i}", age, size=1000)
    janitor = Janitor(tmp_path / "outputs", NO_LIMITS, 60, clock=lambda: NOW, uploads_dir=cache,
                      upload_policy=UploadPolicy(max_total_bytes=1500))
    assert names(janitor.run_once()) == {"u0", "u1"}
    assert Janitor(tmp_path / "outputs", NO_LIMITS, 60).sweep_uploads() == []


def test_captions_go_with_their_audio_and_the_pronunciation_dictionary_is_never_touched(tmp_path):
    out, prompts = tmp_path / "outputs", tmp_path / "prompts"
    for name in ("old.wav", "old.vtt", "old.srt", "new.wav", "new.vtt"):
        make(out / name, (25 if name.startswith("old") else 1) * HOUR)
    dictionary = make(prompts / "pronunciations.tsv", 100 * HOUR)
    kept = make(prompts / "pronunciations.tsv.damaged-20260101T000000", 100 * HOUR)
    stray = make(out / "pronunciations.tsv", 100 * HOUR)  # not an output kind: left alone even here
    removed = sweep(out, NOW, JanitorPolicy(max_age_s=24 * HOUR))
    assert names(removed) == {"old.wav", "old.vtt", "old.srt"}
    assert left(out) == {"new.wav", "new.vtt", "pronunciations.tsv"}
    # outputs/ set to the data folder by mistake: the box's own policy refuses to sweep it at all
    policy = JanitorPolicy.from_settings(Settings(root=tmp_path, outputs_dir=prompts))
    assert sweep(prompts, NOW, policy) == []
    assert dictionary.exists() and kept.exists() and stray.exists()
