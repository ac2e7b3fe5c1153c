"""Every way in still starts after the package moves: ``app.py --help``, ``python -m cosyedge --help``
and every command's ``--help``, every ``scripts/*.py --help``, ``bash -n`` on every ``scripts/*.sh``,
and the systemd units of ``deploy/`` naming files, units and flags that exist.

The benches' ``--help`` is tested with bench/. Each subprocess here only parses its arguments, so the
whole file runs in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

#: Where the units expect the checkout (docs/operations.md); read as the repository's root here.
INSTALL_ROOT = "/opt/cosyedge"


def run_help(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
    return done


# --- app.py and python -m cosyedge -------------------------------------------------------------------


def test_app_help():
    assert "--wyoming-port" in run_help("app.py").stdout


def test_module_help_lists_every_command():
    from cosyedge import cli

    listed = run_help("-m", "cosyedge").stdout
    commands = [path[0] for path in command_paths(cli.build_parser()) if len(path) == 1]
    assert all(name in listed for name in commands), (commands, listed)


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and nested command of ``parser`` (``("library", "save")``, ...), read from its
    sub-parser actions (argparse keeps them in ``_actions``; there is no public list)."""
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                paths.append(prefix + (name,))
                paths.extend(command_paths(child, prefix + (name,)))
    return paths


def test_every_command_answers_help(capsys):
    """In this process (one parser build): the one subprocess above shows the module runs."""
    from cosyedge import cli

    paths = command_paths(cli.build_parser())
    assert ("speak",) in paths and ("library", "save") in paths
    for path in paths:
        with pytest.raises(SystemExit) as exited:
            cli.main([*path, "--help"])
        assert exited.value.code == 0, path
        assert capsys.readouterr().out.startswith("usage: python -m cosyedge " + " ".join(path)), path


# --- scripts/ -------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "scripts").glob("*.py")))
def test_script_help(script):
    """In .venv: a script that needs torch imports it after parsing its arguments."""
    run_help(f"scripts/{script}")


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "scripts").glob("*.sh")))
def test_shell_script_parses(script):
    done = subprocess.run(["bash", "-n", f"scripts/{script}"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- deploy/ ----------------------------------------------------------------------------------------

UNITS = sorted(p.name for p in (REPO / "deploy").iterdir() if p.suffix in (".service", ".timer"))


def unit_settings(name: str) -> dict[str, list[str]]:
    """Key -> its values (in order) over every section of a systemd unit file."""
    settings: dict[str, list[str]] = {}
    for line in (REPO / "deploy" / name).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def in_checkout(path: str) -> Path:
    assert path == INSTALL_ROOT or path.startswith(INSTALL_ROOT + "/"), f"{path} is outside {INSTALL_ROOT}"
    return REPO / path[len(INSTALL_ROOT):].lstrip("/")


def test_the_deploy_folder_has_the_units_the_docs_name():
    assert UNITS == ["cosyedge-recover.service", "cosyedge-update.service", "cosyedge-update.timer",
                     "cosyedge.service"]


@pytest.mark.parametrize("unit", ["cosyedge-update.service", "cosyedge-recover.service"])
def test_the_update_units_pass_flags_that_update_sh_accepts(unit):
    (exec_start,) = unit_settings(unit)["ExecStart"]
    _, *flags = shlex.split(exec_start)
    script = (REPO / "scripts" / "update.sh").read_text(encoding="utf-8")
    assert all(f"\n        {flag}) " in script for flag in flags), flags  # main's case of its arguments


@pytest.mark.parametrize("unit", [u for u in UNITS if u.endswith(".service")])
def test_service_unit_starts_a_command_that_exists(unit):
    settings = unit_settings(unit)
    assert settings["WorkingDirectory"] == [INSTALL_ROOT]
    for doc in settings.get("Documentation", []):
        assert in_checkout(doc.removeprefix("file://")).is_file(), doc
    (exec_start,) = settings["ExecStart"]
    program, *args = shlex.split(exec_start)
    path = in_checkout(program)
    if path.parent == REPO / ".venv" / "bin":
        # made by setup.sh, not committed: the unit's python is the one setup creates
        assert "-m venv .venv\n" in (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    else:
        assert path.is_file() and os.access(path, os.X_OK), f"{program} is not an executable file"
    if args and args[0].endswith(".py"):
        assert (REPO / args[0]).is_file(), args[0]


def test_the_app_unit_passes_flags_that_app_py_accepts():
    import app

    (exec_start,) = unit_settings("cosyedge.service")["ExecStart"]
    _, script, *flags = shlex.split(exec_start)
    assert script == "app.py"
    settings = app.from_args(app.parse_args(flags), environ={})
    assert settings.device == "edge" and settings.quantized


def test_the_timer_starts_a_unit_of_the_deploy_folder():
    (target,) = unit_settings("cosyedge-update.timer")["Unit"]
    assert target in UNITS


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_reads_the_units_without_a_complaint(tmp_path):
    """The units as systemd reads them (unknown keys, bad values, missing executables), with the
    install root pointed at this checkout."""
    for unit in UNITS:
        text = (REPO / "deploy" / unit).read_text(encoding="utf-8")
        (tmp_path / unit).write_text(text.replace(INSTALL_ROOT, str(REPO)), encoding="utf-8")
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout for the app unit's ExecStart")
    done = subprocess.run(["systemd-analyze", "verify", *(f"./{unit}" for unit in UNITS)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
