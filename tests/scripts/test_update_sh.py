"""scripts/update.sh against a local bare repository made in the test.

The "box" (tests/helpers/update_box.py) is a clone of that repository with a tiny fake app: app.py
serves its version and commit on /health, selftest.py passes or fails as the commit says. The script
runs its real pid-file restart and its real HTTP health check; only the self-test and install
commands are the test's. What an update does when it is killed part-way is in
test_update_interrupted.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from tests.helpers.update_box import PY, SCRIPT, Box, git, pid_alive

pytestmark = pytest.mark.slow


@pytest.fixture
def box(tmp_path):
    b = Box(tmp_path)
    yield b
    b.stop()


def test_good_update_is_applied_and_the_new_commit_runs(box):
    old_version, old_pid = box.serving()
    assert old_version == "v1"
    v2 = box.commit("v2")
    result = box.update()
    assert result.returncode == 0, box.log
    assert box.head() == v2
    version, pid = box.wait_serving()
    assert version == "v2" and pid != old_pid  # the new commit is what answers now
    assert int(box.pidfile.read_text()) == pid
    assert box.health()["commit"] == v2
    assert not pid_alive(old_pid)
    assert box.state("verified")["commit"] == v2 and box.state("last")["result"] == "updated"
    assert not box.state("transaction") and not (box.state_dir / "added").exists()
    assert box.install_count() == 0  # requirements.txt did not change
    box.assert_data_untouched()
    log = box.log
    assert f"updated: {v2} is running (was {box.v1})" in log
    assert "step self-test: ok" in log and "requirements.txt unchanged" in log
    assert box.models.read_text().splitlines() == ["model"]  # setup-model ran once, before the self-test
    assert log.index("step embedded model") < log.index("step self-test")
    stamped = [line for line in log.splitlines() if "[update " in line]
    assert len(stamped) >= 10
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[update \d+\] ", line) for line in stamped)


def test_update_reinstalls_only_when_requirements_change(box):
    box.commit("v2", extra={"requirements.txt": "numpy\nsoundfile\n"})
    assert box.update().returncode == 0, box.log
    assert box.install_count() == 1
    assert box.wait_serving()[0] == "v2"


def test_failed_selftest_rolls_back_and_leaves_the_running_app_alone(box):
    """The self-test runs before the restart: the app that serves was never stopped, so the rollback
    puts the old files back and leaves it serving (no needless outage, no job stopped)."""
    _, old_pid = box.serving()
    v2 = box.commit("v2", selftest_ok=False, extra={"requirements.txt": "numpy\nbroken-pkg\n"})
    result = box.update()
    assert result.returncode == 1, box.log
    assert box.head() == box.v1
    assert box.serving() == ("v1", old_pid)  # the same process, never restarted
    assert box.install_count() == 2  # new requirements, then the old ones again
    assert (box.app / "selftest.py").read_text().endswith("sys.exit(0)\n")  # old files back
    box.assert_data_untouched()
    log = box.log
    assert "step self-test: FAILED" in log and "ROLLBACK" in log
    assert f"the running app ({box.v1}) was never stopped and answers; left alone" in log
    assert "step restart old version" not in log
    assert f"rolled back: {box.v1} is running again" in log
    assert box.state("last") | {"at": ""} == {"result": "rolled_back", "from": box.v1, "to": v2,
                                             "step": "self-test", "reason": "step self-test failed",
                                             "at": ""}
    assert box.state("verified")["commit"] == box.v1 and not box.state("transaction")


def test_failed_selftest_restarts_the_old_version_when_the_app_is_down(box):
    """Left alone only when it still answers: an app that died meanwhile is started again."""
    box.commit("v2", selftest_ok=False)
    _, old_pid = box.serving()
    result = box.update(COSYEDGE_SELFTEST_CMD=f"kill -9 {old_pid}; exit 1")
    assert result.returncode == 1, box.log
    version, pid = box.wait_serving()
    assert version == "v1" and pid != old_pid
    assert "step restart old version: ok" in box.log


def test_failed_model_setup_rolls_back_and_the_old_version_gets_its_model_back(box):
    """The embedded model's derived files follow the code (assembly.RUNTIME_VERSION): a new
    version whose setup-model fails is rolled back, and setup-model runs again for the old one."""
    box.commit("v2")
    marker = box.models
    result = box.update(COSYEDGE_MODEL_CMD=f"echo model >> {marker}; test $(wc -l < {marker}) -gt 1")
    assert result.returncode == 1, box.log
    assert box.head() == box.v1 and box.wait_serving()[0] == "v1"
    assert marker.read_text().splitlines() == ["model", "model"]  # the new version's, then the old one's
    log = box.log
    assert "step embedded model (setup-model" in log and "failed at: model" in log
    assert "step self-test" not in log  # stopped before it
    assert "left alone" in log


def test_new_commit_that_does_not_start_is_rolled_back(box):
    box.commit("v2", crash=True)
    result = box.update()
    assert result.returncode == 1, box.log
    assert box.head() == box.v1
    assert box.wait_serving()[0] == "v1"
    assert "step restart: FAILED" in box.log and "broken build" in box.log


def test_second_concurrent_run_is_refused_by_the_lock(box):
    release = box.tmp / "release"
    v2 = box.commit("v2")
    waiting_selftest = (f"{PY} -c \"import pathlib,time\n"
                        f"while not pathlib.Path('{release}').exists(): time.sleep(0.05)\"")
    first = subprocess.Popen(["bash", str(SCRIPT)], env=box.update_env(COSYEDGE_SELFTEST_CMD=waiting_selftest),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while "step self-test: start" not in box.log and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "step self-test: start" in box.log
        second = box.update()
        assert second.returncode == 2
        assert "another update is running" in second.stderr
        assert box.update("--keepalive").returncode == 0  # cron's keepalive: the update keeps it running
        assert box.head() == v2  # the second run did not disturb the first
    finally:
        release.touch()
        first.wait(60)
    assert first.returncode == 0, box.log
    assert box.wait_serving()[0] == "v2"
    assert box.update().returncode == 0  # the lock is free again (the app did not inherit it)
    assert "already up to date" in box.log


def test_dirty_tree_is_refused_without_damage(box):
    _, old_pid = box.serving()
    local_edit = (box.app / "app.py").read_text() + "# a teacher's local tweak\n"
    (box.app / "app.py").write_text(local_edit)
    box.commit("v2")
    result = box.update()
    assert result.returncode == 3
    assert "local changes" in result.stderr and "app.py" in result.stderr
    assert box.head() == box.v1
    assert (box.app / "app.py").read_text() == local_edit
    assert box.serving() == ("v1", old_pid)  # not restarted
    box.assert_data_untouched()


def test_rewritten_history_is_refused(box):
    _, old_pid = box.serving()
    git(box.dev, "commit", "-q", "--amend", "-m", "v1 rewritten")
    git(box.dev, "push", "-q", "--force", "origin", "HEAD:main")
    result = box.update()
    assert result.returncode == 4 and "not a fast-forward" in result.stderr
    assert box.head() == box.v1 and box.serving() == ("v1", old_pid)


def test_update_touching_user_data_dirs_is_refused(box):
    box.commit("v2", extra={"models/kokoro-int8/model.onnx": "upstream would overwrite the model"})
    result = box.update()
    assert result.returncode == 5 and "models/kokoro-int8/model.onnx" in result.stderr
    assert box.head() == box.v1
    box.assert_data_untouched()


def test_an_update_shipping_a_pronunciation_dictionary_is_refused(box):
    box.commit("v2", extra={"prompts/pronunciations.tsv": "zh\t银行\tyin2 xing2\n"})
    result = box.update()
    assert result.returncode == 5 and "prompts/pronunciations.tsv" in result.stderr
    assert box.head() == box.v1
    box.assert_data_untouched()  # the teacher's dictionary among the data


def test_nothing_new_is_a_quiet_success(box):
    before = box.serving()
    result = box.update()
    assert result.returncode == 0 and "already up to date" in result.stderr
    assert box.serving() == before  # no restart when there is nothing to apply


def test_fast_forward_cut_short_by_a_full_disk_puts_the_old_files_back(box, tmp_path):
    """A checkout that runs out of space stops midway: HEAD has not moved, but the files written so far
    are the new version's and the one being written is cut short (seen with git 2.39 on a full 3 MB
    tmpfs). The update must not leave that mix behind as "nothing changed". Here the file-size limit
    (ulimit -f) stops git the same way, without root."""
    _, old_pid = box.serving()
    old_app = (box.app / "app.py").read_text()
    box.commit("v2", extra={"zz_big.py": "# padding\n" * 2000})  # app.py is written first, then this
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_git = shutil.which("git")
    (bin_dir / "git").write_text(  # writes past 4 KiB fail with EFBIG, as they would with ENOSPC
        f'#!/bin/bash\nif [ "$1" = merge ]; then ulimit -f 4; trap "" XFSZ; fi\nexec {real_git} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    result = box.update(PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert result.returncode == 1, box.log
    assert "step fast-forward" in box.log and "FAILED" in box.log
    assert box.head() == box.v1
    assert git(box.app, "status", "--porcelain", "--untracked-files=no") == ""  # no half-written files
    assert (box.app / "app.py").read_text() == old_app
    assert not (box.app / "zz_big.py").exists()
    assert box.serving() == ("v1", old_pid)  # the running app was left alone
    box.assert_data_untouched()


def test_untracked_file_in_the_way_is_kept_and_nothing_changes(box):
    _, old_pid = box.serving()
    (box.app / "notes.txt").write_text("the teacher's own notes\n")  # untracked, not ignored
    box.commit("v2", extra={"notes.txt": "upstream notes\n"})
    result = box.update()
    assert result.returncode == 1, box.log
    assert (box.app / "notes.txt").read_text() == "the teacher's own notes\n"
    assert box.head() == box.v1 and git(box.app, "status", "--porcelain", "--untracked-files=no") == ""
    assert box.serving() == ("v1", old_pid)


def test_app_started_by_hand_without_a_pid_file_is_not_taken_for_the_new_one(box):
    """The app was started by hand (scripts/run.sh), so the pid file names no running app. The new
    app cannot bind the port the old one holds, but the real one imports for seconds first: the
    health check must not take the old app's answer for the new version's."""
    _, old_pid = box.serving()
    box.pidfile.unlink()
    box.commit("v2", app_extra="time.sleep(3)  # imports, like gradio's")
    try:
        result = box.update()
        assert result.returncode == 7, box.log  # rolled back; a person must stop the stray app
        assert "updated:" not in box.log and "whose pid is not in" in box.log
        assert box.head() == box.v1
        assert box.serving() == ("v1", old_pid)
        box.assert_data_untouched()
    finally:
        os.kill(old_pid, signal.SIGKILL)


# --- keeping the app running without systemd (cron: `update.sh --keepalive`) --------------------

def wait_down(box) -> None:
    deadline = time.monotonic() + 10
    while box.serving() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.serving() is None


def test_keepalive_starts_the_app_when_it_is_down_and_says_nothing_otherwise(box):
    before = box.serving()
    assert box.update("--keepalive").returncode == 0
    assert box.serving() == before and box.log == ""  # every few minutes from cron: no log noise
    box.stop()  # a crash, or a reboot
    wait_down(box)
    result = box.update("--keepalive")
    assert result.returncode == 0, box.log
    version, pid = box.wait_serving()
    assert version == "v1" and box.app_pid() == pid and box.health()["commit"] == box.v1
    assert "the app is not running" in box.log and "starting it at " + box.v1 in box.log


def test_keepalive_never_fetches(box):
    box.commit("v2")
    assert box.update("--keepalive").returncode == 0
    assert box.head() == box.v1 and box.serving()[0] == "v1"


def test_nightly_run_with_nothing_new_starts_an_app_that_is_down(box):
    box.stop()
    wait_down(box)
    result = box.update()
    assert result.returncode == 0 and "already up to date" in result.stderr
    assert box.wait_serving()[0] == "v1"


def test_keepalive_says_so_when_the_app_cannot_start(box):
    box.stop()
    wait_down(box)
    (box.app / "app.py").write_text("raise SystemExit('cannot start')\n")
    result = box.update("--keepalive")
    assert result.returncode == 7
    assert "does not start" in box.log and "cannot start" in box.log
