"""scripts/setup.sh's free-disk check, run on a copy of the script in an empty checkout.

A first install needs a few GB (two virtual environments and the model); on a full disk pip used to
stop midway with "[Errno 28] No space left on device". The check stops before anything is created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "setup.sh"


def _run_setup(tmp_path: Path, need_mb: int) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run ``setup.sh --dev`` in an empty checkout under ``tmp_path`` with ``need_mb`` as the figure
    and a ``python3`` that fails loudly (so the script never installs anything)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\necho fake python3 reached >&2\nexit 3\n")
    (fake_bin / "python3").chmod(0o755)
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "scripts" / "setup.sh")
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "COSYEDGE_SETUP_NEED_MB": str(need_mb)}
    done = subprocess.run(["bash", "scripts/setup.sh", "--dev"], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=60)
    return checkout, done


def test_setup_stops_with_the_figures_when_the_disk_is_too_full(tmp_path: Path) -> None:
    need = 10 ** 12  # more MB than any disk has
    checkout, done = _run_setup(tmp_path, need)

    assert done.returncode == 1
    message = done.stderr.strip()
    assert message.startswith(f"error: setup needs about {need} MB free on {checkout}")
    free_mb = int(message.split("only ")[1].split(" MB")[0])
    assert 0 <= free_mb < need
    assert "fake python3 reached" not in done.stderr
    assert not (checkout / ".venv").exists()


def test_setup_goes_on_when_the_space_is_there(tmp_path: Path) -> None:
    _, done = _run_setup(tmp_path, 1)

    assert "error: setup needs" not in done.stderr
    assert "fake python3 reached" in done.stderr  # it went on to create .venv
