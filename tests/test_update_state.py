"""What /health says about the running commit and the OTA update (cosyedge/host/update_state.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from cosyedge.host.update_state import Deployment, read_head, read_state


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "box"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for n in (1, 2):
        (root / "app.py").write_text(f"v{n}\n")
        git(root, "add", "app.py")
        git(root, "commit", "-q", "-m", f"v{n}")
    return root


def test_head_is_read_from_loose_and_packed_refs_and_a_detached_head(checkout):
    head = git(checkout, "rev-parse", "HEAD")
    assert read_head(checkout) == head
    git(checkout, "pack-refs", "--all")  # refs/heads/main now lives in packed-refs only
    assert not (checkout / ".git" / "refs" / "heads" / "main").exists()
    assert read_head(checkout) == head
    first = git(checkout, "rev-parse", "HEAD~1")
    git(checkout, "checkout", "-q", "--detach", first)
    assert read_head(checkout) == first


def test_head_of_a_worktree_and_of_no_checkout(checkout, tmp_path):
    other = tmp_path / "wt"
    git(checkout, "worktree", "add", "-q", "-b", "side", str(other), "HEAD~1")
    assert (other / ".git").is_file()
    assert read_head(other) == git(checkout, "rev-parse", "HEAD~1")
    assert read_head(tmp_path / "nowhere") is None
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / ".git").write_text("not a pointer")
    assert read_head(tmp_path / "plain") is None


def test_status_follows_the_update_scripts_files(checkout, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    deployment = Deployment(checkout, state)
    running = deployment.running
    idle = deployment.status()
    assert (idle.running, idle.checkout, idle.pending, idle.rolled_back) == (running, running, False, False)

    new = "a" * 40
    (state / "transaction").write_text(f"old={running}\nnew={new}\nphase=forward\nstep=self-test\n"
                                       "attempt=2\nstarted=2026-12-01T03:31:00Z\n")
    pending = deployment.status().as_dict()
    assert pending["commit"] == running and pending["update"]["pending"] is True
    assert pending["update"]["transaction"] == {"from": running, "to": new, "phase": "forward",
                                                "step": "self-test", "attempt": "2",
                                                "since": "2026-12-01T03:31:00Z"}

    (state / "transaction").unlink()
    (state / "verified").write_text(f"commit={running}\nhow=x\nat=y\n")
    (state / "last").write_text(f"result=rolled_back\nfrom={running}\nto={new}\nstep=self-test\n"
                                "reason=step self-test failed\nat=2026-12-01T03:32:00Z\n")
    rolled = deployment.status()
    assert rolled.rolled_back and not rolled.pending and rolled.verified == running
    assert rolled.as_dict()["update"]["last"]["to"] == new


def test_a_checkout_moved_under_the_running_app_is_a_pending_update(checkout, tmp_path):
    deployment = Deployment(checkout, tmp_path / "state")  # the process starts here
    (checkout / "app.py").write_text("v3\n")
    git(checkout, "commit", "-q", "-am", "v3")  # the update's fast-forward, before its restart
    status = deployment.status()
    assert status.running != status.checkout and status.pending
    assert status.as_dict()["commit"] == deployment.running  # the code that answers, not the files


def test_torn_or_odd_state_files_do_not_break_health(tmp_path):
    (tmp_path / "last").write_bytes(b"result=upd\xffated\nno equals sign\n")
    assert read_state(tmp_path / "last")["result"].startswith("upd")
    assert read_state(tmp_path / "absent") is None


def test_health_names_the_running_commit_and_a_rollback(make_service, live_server, checkout, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    service = make_service(deployment=Deployment(checkout, state))
    server = live_server(service)
    health = httpx.get(f"{server.url}/health").json()
    head = git(checkout, "rev-parse", "HEAD")
    assert health["commit"] == head and health["status"] == "ok"
    assert health["update"]["pending"] is False and health["update"]["rolled_back"] is False
    (state / "last").write_text(f"result=rolled_back\nfrom={head}\nto={'b' * 40}\nstep=restart\n")
    update = httpx.get(f"{server.url}/health").json()["update"]
    assert update["rolled_back"] is True and update["last"]["step"] == "restart"


def test_the_service_reads_the_checkout_it_was_imported_from():
    from tests.helpers import REPO

    assert Deployment.of_this_code().root == REPO
    assert Deployment.of_this_code().running == read_head(REPO)
