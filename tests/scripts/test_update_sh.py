"""scripts/update.sh against a local bare repository made in the test.

The "box" is a clone of that repository with a tiny fake app: app.py serves its VERSION on
/health, selftest.py passes or fails as the commit says. The script runs its real pid-file restart
and its real HTTP health check; only the self-test and install commands are the test's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.helpers import REPO

pytestmark = pytest.mark.slow

SCRIPT = REPO / "scripts" / "update.sh"
PY = sys.executable

FAKE_APP = '''\
"""Fake cosyedge app: answers every GET with its version and pid."""
import http.server, os, time

VERSION = "{version}"
{crash}

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{{VERSION}} {{os.getpid()}}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", int(os.environ["COSYEDGE_PORT"])), Handler)
server.timeout = 0.5
end = time.time() + 300  # never outlive the test run by much
while time.time() < end:
    server.handle_request()
'''

GITIGNORE = "var/\nmodels/*\n!models/README.md\nprompts/*\n!prompts/README.md\noutputs/*\n!outputs/README.md\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class Box:
    """Upstream bare repo, a developer clone that pushes to it, and the box's checkout."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bare = tmp / "origin.git"
        self.dev = tmp / "dev"
        self.app = tmp / "box"
        self.port = free_port()
        self.installs = tmp / "installs.log"
        self.models = tmp / "models.log"
        self.env = {**os.environ, "HOME": str(tmp), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
        os.environ.update({k: self.env[k] for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                                                    "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")})
        git(tmp, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(tmp, "clone", "-q", str(self.bare), str(self.dev))
        self.commit("v1", message="v1", extra={".gitignore": GITIGNORE, "requirements.txt": "numpy\n",
                                              "models/README.md": "models here\n",
                                              "prompts/README.md": "voices here\n",
                                              "outputs/README.md": "outputs here\n"})
        self.v1 = git(self.dev, "rev-parse", "HEAD")
        git(tmp, "clone", "-q", str(self.bare), str(self.app))
        # user data the update must never touch (git-ignored, like on a real box)
        self.data = {"prompts/teacher.wav": b"RIFF-voice", "outputs/job1.wav": b"RIFF-out",
                     "models/kokoro-int8/model.onnx": b"weights",
                     "prompts/pronunciations.tsv": "zh\t银行\tyin2 hang2\n".encode()}
        for rel, content in self.data.items():
            (self.app / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.app / rel).write_bytes(content)
        self.start_app()

    # --- upstream ------------------------------------------------------------------------
    def commit(self, version: str, selftest_ok: bool = True, crash: bool = False,
               message: str | None = None, extra: dict[str, str] | None = None) -> str:
        files = {"app.py": FAKE_APP.format(version=version,
                                          crash="raise SystemExit('broken build')" if crash else ""),
                 "selftest.py": "import sys\nprint('fake selftest')\nsys.exit(%d)\n" % (0 if selftest_ok else 1),
                 **(extra or {})}
        for rel, text in files.items():
            (self.dev / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.dev / rel).write_text(text)
        git(self.dev, "add", "-A")
        git(self.dev, "add", "-f", *files)  # even paths the .gitignore hides (the protected-dirs test)
        git(self.dev, "commit", "-q", "-m", message or version)
        git(self.dev, "push", "-q", "origin", "HEAD:main")
        return git(self.dev, "rev-parse", "HEAD")

    # --- the box -------------------------------------------------------------------------
    @property
    def pidfile(self) -> Path:
        return self.app / "var" / "run" / "cosyedge.pid"

    @property
    def log(self) -> str:
        path = self.app / "var" / "log" / "update.log"
        return path.read_text() if path.exists() else ""

    def start_app(self) -> None:
        """What the admin did once by hand: the app started with its pid recorded."""
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([PY, "app.py"], cwd=self.app, start_new_session=True,
                                env={**self.env, "COSYEDGE_PORT": str(self.port)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pidfile.write_text(f"{proc.pid}\n")
        self.wait_serving()

    def serving(self) -> tuple[str, int] | None:
        """(version, pid) of the app answering on the port, or None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                version, pid = r.read().decode().split()
                return version, int(pid)
        except OSError:
            return None

    def wait_serving(self, timeout: float = 15) -> tuple[str, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (answer := self.serving()) is not None:
                return answer
            time.sleep(0.1)
        raise AssertionError("the fake app never answered")

    def update_env(self, **overrides: str) -> dict[str, str]:
        return {**self.env, "COSYEDGE_APP_DIR": str(self.app), "COSYEDGE_PYTHON": PY,
                "COSYEDGE_PORT": str(self.port), "COSYEDGE_HEALTH_TIMEOUT": "15",
                "COSYEDGE_SYSTEMD_UNIT": "cosyedge-test-absent.service",
                "COSYEDGE_SELFTEST_CMD": f"{PY} selftest.py",
                "COSYEDGE_INSTALL_CMD": f"echo installed >> {self.installs}",
                "COSYEDGE_MODEL_CMD": f"echo model >> {self.models}", **overrides}

    def update(self, **overrides: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT)], env=self.update_env(**overrides),
                              capture_output=True, text=True, timeout=120)

    def head(self) -> str:
        return git(self.app, "rev-parse", "HEAD")

    def install_count(self) -> int:
        return len(self.installs.read_text().splitlines()) if self.installs.exists() else 0

    def assert_data_untouched(self) -> None:
        for rel, content in self.data.items():
            assert (self.app / rel).read_bytes() == content, rel

    def stop(self) -> None:
        try:
            pid = int(self.pidfile.read_text())
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


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
    assert not pid_alive(old_pid)
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


def test_failed_selftest_rolls_back_and_the_old_commit_runs_again(box):
    _, old_pid = box.serving()
    box.commit("v2", selftest_ok=False, extra={"requirements.txt": "numpy\nbroken-pkg\n"})
    result = box.update()
    assert result.returncode == 1, box.log
    assert box.head() == box.v1
    version, pid = box.wait_serving()
    assert version == "v1"  # the old commit, restarted
    assert pid != old_pid and not pid_alive(old_pid)
    assert box.install_count() == 2  # new requirements, then the old ones again
    assert (box.app / "selftest.py").read_text().endswith("sys.exit(0)\n")  # old files back
    box.assert_data_untouched()
    log = box.log
    assert "step self-test: FAILED" in log and "ROLLBACK" in log
    assert f"rolled back: {box.v1} is running again" in log


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
    slow_start = FAKE_APP.format(version="v2", crash="time.sleep(3)  # imports, like gradio's")
    box.commit("v2", extra={"app.py": slow_start})
    try:
        result = box.update()
        assert result.returncode == 7, box.log  # rolled back; a person must stop the stray app
        assert "updated:" not in box.log and "whose pid is not in" in box.log
        assert box.head() == box.v1
        assert box.serving() == ("v1", old_pid)
        box.assert_data_untouched()
    finally:
        os.kill(old_pid, signal.SIGKILL)
