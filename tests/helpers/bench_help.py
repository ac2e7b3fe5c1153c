"""Run ``--help`` of each bench script given on the command line, all in this one process, and print
``{script: [exit code, printed usage]}`` as JSON: the imports every script shares (numpy,
onnxruntime, ...) load once, so checking all of them costs about what one costs alone.

Each script starts as if alone: the repository's own modules are dropped from ``sys.modules`` and
``sys.path`` is restored before it runs, so a script that only worked because an earlier one put the
repository on the path, or imported ``cosyedge`` first, fails here too. Run it by its path from
outside the repository (``python tests/helpers/bench_help.py bench/*.py``): it imports nothing of
the repository itself.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _ours(module: object) -> bool:
    """A module of the repository's own code (not of a virtual environment inside it)."""
    path = Path(getattr(module, "__file__", None) or "/")
    return path.is_relative_to(REPO) and not path.relative_to(REPO).parts[0].startswith(".")


def help_exit(script: str, path: list[str]) -> tuple[object, bool]:
    """(exit code or the exception, whether a usage line was printed) of ``script --help``."""
    for name in [name for name, module in sys.modules.items() if _ours(module)]:
        del sys.modules[name]
    sys.path[:] = path
    sys.argv = [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(script, run_name="__main__")
        code: object = 0
    except SystemExit as stop:
        code = stop.code or 0
    except BaseException as error:  # noqa: BLE001 - reported, the next script still runs
        code = f"{type(error).__name__}: {error}"
    return code, "usage:" in out.getvalue()


def main(scripts: list[str]) -> None:
    path = [entry for entry in sys.path if entry != str(Path(__file__).resolve().parent)]
    print(json.dumps({script: help_exit(script, list(path)) for script in scripts}))


if __name__ == "__main__":
    main(sys.argv[1:])
