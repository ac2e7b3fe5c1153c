"""Every bench script answers ``--help`` in the app's environment (``.venv``, no torch): a moved or
renamed import in ``cosyedge/`` or ``bench/common.py`` fails here instead of at the next measurement.
Torch and the other heavy libraries are imported where a bench uses them, never at the top, so
``--help`` needs only what the app has. All scripts run in one child process
(``tests/helpers/bench_help.py``, each started as if alone), which shares the libraries' import time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

#: The bench scripts: every bench/*.py that runs as a program (bench/common.py is the shared module).
SCRIPTS = sorted(path for path in (REPO / "bench").glob("*.py") if '__name__ == "__main__"' in path.read_text())


def helps(scripts: list[Path], cwd: Path) -> dict[str, list]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(REPO / "tests" / "helpers" / "bench_help.py"), *map(str, scripts)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=True)
    return {Path(name).name: result for name, result in json.loads(run.stdout).items()}


def test_every_bench_script_answers_help(tmp_path):
    assert len(SCRIPTS) > 20 and REPO / "bench" / "common.py" not in SCRIPTS
    results = helps(SCRIPTS, tmp_path)
    failed = {name: code for name, (code, usage) in results.items() if code != 0 or not usage}
    assert not failed, f"bench scripts that do not answer --help: {failed}"


def test_a_script_that_leans_on_another_ones_path_fails(tmp_path):
    """The check sees each script alone: one that imports ``cosyedge`` without putting the
    repository on ``sys.path`` fails even after a script that did."""
    leaning = REPO / "bench" / "kokoro_rtf.py"
    alone = tmp_path / "no_path.py"
    alone.write_text("import argparse\nimport cosyedge\nargparse.ArgumentParser().parse_args()\n")
    results = helps([leaning, alone], tmp_path)
    assert results["kokoro_rtf.py"] == [0, True]
    assert results["no_path.py"][0].startswith("ModuleNotFoundError")
