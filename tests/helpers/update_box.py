"""A box that scripts/update.sh updates, for tests/scripts/: a local bare repository ("upstream"),
a developer clone that pushes to it, and the box's own clone with a tiny fake app.

The fake app answers /health with its version, pid and the commit it started on (as the real app's
/health does), so the tests see which commit serves; while ``var/slow-stop`` exists, it takes 2 s to
stop and first touches the file that names. ``Box.update()`` runs the real script with its
real pid-file restart and HTTP health check; only the self-test, install and model commands are the
test's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "update.sh"
PY = sys.executable

FAKE_APP = '''\
"""Fake cosyedge app: answers every GET with its version, pid and commit."""
import http.server, json, os, pathlib, signal, subprocess, sys, time

VERSION = "{version}"
COMMIT = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
{extra}

def stop(signum, frame):
    slow = pathlib.Path("var/slow-stop")  # a test's: stopping takes 2 s and touches the file named
    if slow.exists():
        pathlib.Path(slow.read_text()).touch()
        time.sleep(2)
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"version": VERSION, "pid": os.getpid(), "commit": COMMIT}}).encode()
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

#: Ends the fake app at once, before it listens: a build that cannot start.
CRASH = "raise SystemExit('broken build')"

GITIGNORE = ("var/\n.venv\nmodels/*\n!models/README.md\nprompts/*\n!prompts/README.md\noutputs/*\n"
             "!outputs/README.md\n")


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


def checksums(root: Path, dirs: tuple[str, ...] = ("prompts", "outputs", "models")) -> dict[str, str]:
    """sha256 of every file under ``dirs`` of ``root`` (a symlink by where it points)."""
    sums = {}
    for name in dirs:
        for path in sorted((root / name).rglob("*")):
            rel = str(path.relative_to(root))
            if path.is_symlink():
                sums[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                sums[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


class Box:
    """Upstream bare repo, a developer clone that pushes to it, and the box's checkout.

    ``seed`` (a folder) makes the first commit from its files instead of the fake app's: the real
    app's case copies the repository's tracked files there.
    """

    def __init__(self, tmp: Path, seed: Path | None = None, start: bool = True) -> None:
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
        if seed is None:
            git(tmp, "clone", "-q", str(self.bare), str(self.dev))
            self.commit("v1", message="v1", extra={".gitignore": GITIGNORE, "requirements.txt": "numpy\n",
                                                  "models/README.md": "models here\n",
                                                  "prompts/README.md": "voices here\n",
                                                  "outputs/README.md": "outputs here\n"})
        else:
            seed.rename(self.dev)
            git(self.dev, "init", "-q", "-b", "main")
            git(self.dev, "remote", "add", "origin", str(self.bare))
            git(self.dev, "add", "-A")
            git(self.dev, "commit", "-q", "-m", "v1")
            git(self.dev, "push", "-q", "origin", "HEAD:main")
        self.v1 = git(self.dev, "rev-parse", "HEAD")
        git(tmp, "clone", "-q", str(self.bare), str(self.app))
        # user data the update must never touch (git-ignored, like on a real box)
        self.data = {"prompts/teacher.wav": b"RIFF-voice", "prompts/library/ms-lee/voice.wav": b"RIFF-lee",
                     "outputs/job1.wav": b"RIFF-out", "outputs/job1.json": b"{}",
                     "models/kokoro-int8/model.onnx": b"weights", "models/cosyvoice2/llm.onnx": b"llm",
                     "prompts/pronunciations.tsv": "zh\t银行\tyin2 hang2\n".encode()}
        for rel, content in self.data.items():
            (self.app / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.app / rel).write_bytes(content)
        self.sums = checksums(self.app)
        if start:
            self.start_app()

    # --- upstream ------------------------------------------------------------------------
    def commit(self, version: str, selftest_ok: bool = True, crash: bool = False,
               message: str | None = None, extra: dict[str, str] | None = None,
               app_extra: str = "") -> str:
        """Push a commit of the fake app: its version, whether its self-test passes, whether it
        starts (``crash``), more files (``extra``) and code run at its start (``app_extra``)."""
        files = {"app.py": FAKE_APP.format(version=version, extra=CRASH if crash else app_extra),
                 "selftest.py": "import sys\nprint('fake selftest')\nsys.exit(%d)\n" % (0 if selftest_ok else 1),
                 **(extra or {})}
        return self.push(files, message or version)

    def push(self, files: dict[str, str], message: str) -> str:
        """Commit ``files`` (path -> text) in the developer clone and push them upstream."""
        for rel, text in files.items():
            (self.dev / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.dev / rel).write_text(text)
        git(self.dev, "add", "-A")
        if len(files) < 100:
            git(self.dev, "add", "-f", *files)  # even paths the .gitignore hides (the protected-dirs test)
        git(self.dev, "commit", "-q", "-m", message)
        git(self.dev, "push", "-q", "origin", "HEAD:main")
        return git(self.dev, "rev-parse", "HEAD")

    # --- the box -------------------------------------------------------------------------
    @property
    def pidfile(self) -> Path:
        return self.app / "var" / "run" / "cosyedge.pid"

    @property
    def state_dir(self) -> Path:
        return self.app / "var" / "update"

    @property
    def log(self) -> str:
        path = self.app / "var" / "log" / "update.log"
        return path.read_text() if path.exists() else ""

    def state(self, name: str) -> dict[str, str]:
        """One of the update's state files (``transaction``, ``verified``, ``last``) as a dict."""
        path = self.state_dir / name
        if not path.exists():
            return {}
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)

    def start_app(self) -> None:
        """What the admin did once by hand: the app started with its pid recorded."""
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([PY, "app.py"], cwd=self.app, start_new_session=True,
                                env={**self.env, "COSYEDGE_PORT": str(self.port)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pidfile.write_text(f"{proc.pid}\n")
        self.wait_serving()

    def health(self) -> dict | None:
        """The JSON /health answers, or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def serving(self) -> tuple[str, int] | None:
        """(version, pid) of the app answering on the port, or None."""
        answer = self.health()
        return None if answer is None else (answer["version"], answer["pid"])

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

    def update(self, *args: str, **overrides: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], env=self.update_env(**overrides),
                              capture_output=True, text=True, timeout=300, start_new_session=True)

    def head(self) -> str:
        return git(self.app, "rev-parse", "HEAD")

    def install_count(self) -> int:
        return len(self.installs.read_text().splitlines()) if self.installs.exists() else 0

    def assert_data_untouched(self) -> None:
        for rel, content in self.data.items():
            assert (self.app / rel).read_bytes() == content, rel
        assert checksums(self.app) == self.sums

    def app_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Kill the app the pid file names and whatever still answers on the port."""
        pids = {self.app_pid(), (self.health() or {}).get("pid")}
        for pid in pids - {None}:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
