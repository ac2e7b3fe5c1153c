"""scripts/update.sh killed part-way, as a power cut or the OOM killer would: SIGKILL of its whole
process group at every step boundary and inside the steps that take time, then run again. Every case
must end on a verified commit (the one `var/update/verified` names, checked out cleanly, nothing of
the update left over) with the app answering /health as that commit, and prompts/ outputs/ models/
byte-identical.

Where the cut lands is decided, not raced: at a boundary, the script's step hook
(``COSYEDGE_UPDATE_STEP_HOOK``) marks the moment and blocks; inside a step, the test's own command
for it does; inside the fetch, the box's ``remote.origin.uploadpack``; inside the fast-forward of
3,000 new files, a smudge filter on the 1,501st file (git writes them in order, so a rewritten tracked
file, 1,500 new files and a stale index.lock are left); inside the restart, the old app takes 2 s
to stop. The box is tests/helpers/update_box.py's (a local bare repository, a tiny fake app), and
one case runs the real app.py in .venv.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.update_box import SCRIPT, Box, checksums, git
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

MANY = 3000  # new files in the commit whose fast-forward is cut


@dataclass(frozen=True)
class Cut:
    """Where the first run is killed, and what the next run must end on."""

    id: str
    at: str | None = None  # the step boundary: the hook's step name
    inside: str | None = None  # a step cut while it runs
    good: bool = True  # the new commit passes its self-test: the box ends on it, else on the old one
    requirements: bool = False  # the new commit changes requirements.txt
    power_cut: bool = False  # the app dies too; the box comes back with @reboot's --keepalive
    opened: bool = True  # the transaction was open at the cut (the next run names it)


CUTS = [
    Cut("before-fetch", at="fetch", opened=False),
    Cut("in-fetch", inside="fetch", opened=False),
    Cut("before-fast-forward", at="fast-forward"),
    Cut("in-fast-forward-of-3000-files", inside="fast-forward"),
    Cut("before-install", at="install", requirements=True),
    Cut("in-install", inside="install", requirements=True),
    Cut("before-model", at="model"),
    Cut("in-model", inside="model"),
    Cut("before-self-test", at="self-test"),
    Cut("in-self-test", inside="self-test"),
    Cut("before-restart", at="restart"),
    Cut("in-restart", inside="restart"),
    Cut("before-health", at="health"),
    Cut("before-record", at="done"),
    Cut("before-rollback", at="rollback", good=False),
    Cut("in-rollback-reinstall", inside="reinstall", good=False, requirements=True),
    Cut("power-cut-in-self-test", inside="self-test", power_cut=True),
    Cut("power-cut-in-fast-forward", inside="fast-forward", power_cut=True),
]


def new_commit(box: Box, cut: Cut) -> str:
    extra = {"requirements.txt": "numpy\nsoundfile\n"} if cut.requirements else {}
    if cut.inside == "fast-forward":
        extra |= {f"pad/f{i:04d}.txt": f"file {i}\n" for i in range(MANY)}
        extra[".gitattributes"] = f"pad/f{MANY // 2:04d}.txt filter=tripwire\n"
    return box.commit("v2", selftest_ok=cut.good, extra=extra)


def arm(box: Box, cut: Cut, mark: Path) -> dict[str, str]:
    """Set the trap for the first run; its environment overrides."""
    block = f"touch {mark}; exec sleep 600"
    if cut.at:
        return {"COSYEDGE_UPDATE_STEP_HOOK": f'if [ "$1" = {cut.at} ]; then {block}; fi'}
    if cut.inside == "fetch":  # the box's upload-pack blocks once
        git(box.app, "config", "remote.origin.uploadpack",
            f"[ -e {mark} ] || {{ touch {mark}; exec sleep 600; }}; git-upload-pack")
    elif cut.inside == "fast-forward":  # one file's checkout blocks once, half-way through
        git(box.app, "config", "filter.tripwire.smudge",
            f"sh -c '[ -e {mark} ] || {{ touch {mark}; sleep 600; }}; cat'")
    elif cut.inside == "restart":
        (box.app / "var" / "slow-stop").write_text(str(mark))
    elif cut.inside == "reinstall":  # the rollback's reinstall, the second install of the run
        first = box.tmp / "installed-once"
        return {"COSYEDGE_INSTALL_CMD": f"if [ -e {first} ]; then {block}; fi; touch {first}"}
    else:
        name = {"install": "COSYEDGE_INSTALL_CMD", "model": "COSYEDGE_MODEL_CMD",
                "self-test": "COSYEDGE_SELFTEST_CMD"}[cut.inside]
        return {name: block}
    return {}


def run_and_cut(box: Box, mark: Path, *args: str, timeout: float = 120, **overrides: str) -> None:
    """Start the update in its own process group; SIGKILL the whole group once ``mark`` exists."""
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], env=box.update_env(**overrides),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: mark.exists() or proc.poll() is not None, timeout, "the cut")
        assert mark.exists(), f"the update ended (exit {proc.returncode}) before the cut:\n{box.log}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def assert_verified(box: Box, result: subprocess.CompletedProcess, expected: str) -> None:
    """The box is on ``expected``, verified, cleanly checked out, with the app answering as it."""
    assert result.returncode == (0 if expected != box.v1 else 1), result.stderr
    assert box.head() == expected and box.state("verified")["commit"] == expected, box.log
    assert not box.state("transaction"), box.log
    assert git(box.app, "status", "--porcelain", "--ignored=no") == ""  # nothing tracked or new left over
    assert not list((box.app / ".git").glob("*.lock"))
    wait_until(lambda: box.health() is not None, 20, "the app's answer")
    health = box.health()
    assert health["commit"] == expected and health["pid"] == box.app_pid(), (health, box.log)
    box.assert_data_untouched()


@pytest.mark.parametrize("cut", CUTS, ids=[c.id for c in CUTS])
def test_an_update_killed_anywhere_ends_on_a_verified_commit(tmp_path, cut):
    box = Box(tmp_path)
    try:
        new = new_commit(box, cut)
        mark = tmp_path / "cut"
        run_and_cut(box, mark, **arm(box, cut, mark))
        if cut.inside == "fast-forward":  # the case: what the cut-off checkout looks like
            assert (box.app / ".git" / "index.lock").exists() and box.head() == box.v1
            assert "M app.py" in git(box.app, "status", "--porcelain")
            assert 0 < len(list((box.app / "pad").iterdir())) < MANY
        if cut.power_cut:
            box.stop()
            wait_until(lambda: box.health() is None, 10, "the app down")
        again = box.update("--keepalive") if cut.power_cut else box.update()
        assert_verified(box, again, new if cut.good else box.v1)
        log = box.log
        assert "refused" not in log  # its own leftovers are never taken for the owner's changes
        if cut.opened:
            assert f"INTERRUPTED: the update {box.v1} -> {new}" in log
        if not cut.good:
            assert box.state("last")["result"] == "rolled_back"
    finally:
        box.stop()


def test_a_commit_that_kills_every_try_is_rolled_back_after_three(tmp_path):
    """A self-test that gets the update OOM-killed every time (here: it kills its own process
    group): resumed twice, then rolled back with the app left serving, and not tried again."""
    box = Box(tmp_path)
    try:
        _, old_pid = box.serving()
        new = box.commit("v2")
        killer = {"COSYEDGE_SELFTEST_CMD": "kill -9 0"}
        for attempt in (1, 2, 3):
            assert box.update(**killer).returncode == -signal.SIGKILL, box.log
            assert box.state("transaction")["attempt"] == str(attempt)
        result = box.update(**killer)
        assert_verified(box, result, box.v1)
        assert box.serving() == ("v1", old_pid)  # never stopped
        assert box.state("last") | {"at": ""} == {"result": "rolled_back", "from": box.v1, "to": new,
                                                 "step": "self-test", "reason": "interrupted", "at": ""}
        assert f"{new} was interrupted 3 times" in box.log
        again = box.update()
        assert again.returncode == 1 and f"not trying {new} again" in box.log
        newer = box.commit("v3")
        assert box.update().returncode == 0 and box.head() == newer  # the next commit is tried
    finally:
        box.stop()


def seed_from_worktree(dest: Path) -> None:
    """The repository's tracked and new (not ignored) files, as the working tree has them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_symlink() or not source.is_file():  # the .venv links; files deleted meanwhile
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name)


@pytest.mark.skipif(not (REPO / "models" / "kokoro-int8" / "manifest.json").is_file(),
                    reason="needs the embedded model (scripts/setup.sh)")
def test_the_real_app_after_a_power_cut_in_the_self_test(tmp_path):
    """This repository as the remote, the real app.py in .venv on the box: started by --keepalive
    (as @reboot does), updated, and cut off by a power cut inside the real self-test (the app
    dies too); the next boot's --keepalive finishes the update and the real app's /health names
    the new commit."""
    seed = tmp_path / "seed"
    seed_from_worktree(seed)
    box = Box(tmp_path, seed=seed, start=False)
    try:
        (box.app / ".venv").symlink_to((REPO / ".venv").resolve())
        with open(box.app / ".git" / "info" / "exclude", "a") as exclude:
            exclude.write(".venv\n")  # a link: the repository's ".venv/" pattern does not cover it
        model = box.app / "models" / "kokoro-int8"
        (model / "model.onnx").unlink()
        del box.data["models/kokoro-int8/model.onnx"]
        model.rmdir()
        model.symlink_to((REPO / "models" / "kokoro-int8").resolve())
        box.sums = checksums(box.app)
        python = str(box.app / ".venv" / "bin" / "python")
        real = {"COSYEDGE_PYTHON": python, "COSYEDGE_HEALTH_TIMEOUT": "240",
                "COSYEDGE_SELFTEST_CMD": f"{python} -m cosyedge selftest --no-synthesis",
                "COSYEDGE_MODEL_CMD": "true",  # the model is main's, linked: never rewritten here
                "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}
        started = box.update("--keepalive", **real)
        assert started.returncode == 0, box.log + (box.app / "var/log/app.log").read_text()
        assert box.health()["commit"] == box.v1

        new = box.push({"docs/ota-note.md": "a harmless change\n"}, "v2")
        mark = tmp_path / "cut"
        watcher = f"until grep -q 'step self-test: start' {box.app}/var/log/update.log; do sleep 0.1; done"
        run_and_cut(box, mark, timeout=240, **real,
                    COSYEDGE_UPDATE_STEP_HOOK=f'if [ "$1" = self-test ]; then ({watcher}; sleep 1;'
                                              f' touch {mark}) & fi')
        box.stop()  # the power cut takes the app too
        wait_until(lambda: box.health() is None, 20, "the app down")

        again = box.update("--keepalive", **real)
        assert again.returncode == 0, box.log
        assert box.head() == new and box.state("verified")["commit"] == new
        health = box.health()
        assert health["status"] == "ok" and health["commit"] == new
        assert health["update"]["pending"] is False and health["update"]["rolled_back"] is False
        assert health["update"]["verified"] == new and health["update"]["last"]["result"] == "updated"
        assert git(box.app, "status", "--porcelain", "--ignored=no") == ""
        box.assert_data_untouched()
        assert f"INTERRUPTED: the update {box.v1} -> {new}" in box.log
        assert "PASS  imports" in box.log  # the real self-test ran to the end this time
    finally:
        box.stop()
