"""What the bench scripts share: the machine and load a run saw, starting ``app.py`` and waiting
for it, JSON records, and recording a round in the lab log.

Every figure a bench prints must name its machine, date, command and load average
(CONTRIBUTING.md), so those come from one place. A round is *recorded* in a lab-log file under
docs/bench-log/ (``record_round``), never written into docs/benchmarks.md: that page holds the
current figures, one row each, edited by hand from the round; each bench's ``CURRENT_ROWS`` says
which rows a round may change.

Scripts run as ``python bench/NAME.py`` from the repository root: each puts the root on
``sys.path`` and imports this module as ``bench.common``. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
#: The lab log: every round as it ran, with its narrative.
LOG_DIR = ROOT / "docs" / "bench-log"
#: The current figures, one row each; written by hand, never by a bench.
CURRENT = ROOT / "docs" / "benchmarks.md"
#: CPU flags worth naming beside a figure (the int8 and bf16 paths onnxruntime takes).
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")


# -- machine and load ------------------------------------------------------------------------------


def cpu_model() -> str:
    """``model name`` of /proc/cpuinfo (what ``lscpu`` calls Model name), or ``platform``'s guess."""
    with contextlib.suppress(OSError, AttributeError):
        return re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1).strip()
    return platform.processor() or platform.machine() or "?"


def cpu_flags(wanted: tuple[str, ...] = FLAGS) -> list[str]:
    """Which of ``wanted`` this CPU has."""
    try:
        flags = set(re.search(r"flags\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1).split())
    except (OSError, AttributeError):
        return []
    return [flag for flag in wanted if flag in flags]


def loadavg() -> list[str]:
    """The 1, 5 and 15 minute load averages as /proc/loadavg writes them."""
    return [f"{x:.2f}" for x in os.getloadavg()]


def load_average() -> str:
    """``1.06/1.17/1.13``: the load averages for a table header."""
    return "/".join(loadavg())


def machine() -> str:
    """One line naming the machine, for a table header."""
    import onnxruntime as ort

    flags = cpu_flags(("avx512_vnni", "avx_vnni"))
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu_model()}, {'with' if flags else 'without'} VNNI; {os.cpu_count()} logical CPUs; "
            f"{mem:.0f} GiB RAM; {platform.system()} {platform.release()}; Python {platform.python_version()}; "
            f"onnxruntime {ort.__version__}")


def machine_info() -> dict:
    """The machine, date and load as a JSON record keeps them."""
    return {"cpu": cpu_model(), "flags": cpu_flags(), "cpus": len(os.sched_getaffinity(0)),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "loadavg": loadavg()}


def measured_header(started: dt.datetime, command: str, load_before: str, speed_before: str | None = None) -> str:
    """The first lines of every generated table: when (UTC), on what, with which command, the load
    average before and now (a shared 2-core box makes wall-clock figures load-dependent) and the
    machine speed probe (bench/machine_speed.py: the VM's cores drift with its host, which the load
    average does not see) after the run, and before it where the caller took it."""
    from bench.machine_speed import speed_line

    speed = f"before: {speed_before}; after: {speed_line()}" if speed_before else f"after the run: {speed_line()}"
    return (f"Measured {started:%Y-%m-%d %H:%M}-{dt.datetime.now(dt.timezone.utc):%H:%M} UTC on {machine()}.  \n"
            f"Command: `{command.strip()}`.  \nLoad average (1/5/15 min) before: {load_before}; "
            f"after: {load_average()}.  \nMachine speed probe {speed}.")


# -- process memory and records ----------------------------------------------------------------------


def peak_rss_mb(pid: int | str = "self") -> float:
    """A process's RSS high-water mark in MiB. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from
    the parent through fork and exec, so a worker started by a big parent would report the parent's."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
    except (OSError, AttributeError):
        if pid != "self":
            raise
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def emit(record: dict) -> None:
    """One JSON line on stdout, flushed (the JSON-lines benches' output)."""
    print(json.dumps(record), flush=True)


def report(result: dict, json_path: Path | None) -> int:
    """A stage's summary as one JSON line (without its per-run records) and, when asked, the whole
    result as a JSON file; the exit status of a finished stage."""
    emit({k: v for k, v in result.items() if k != "runs"})
    if json_path:
        json_path.write_text(json.dumps(result, indent=1))
    return 0


# -- the app -----------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on the loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class App:
    """A running ``app.py``: its process and base URL."""

    proc: subprocess.Popen
    url: str


def wait_for_health(url: str, ready: Callable[[dict], bool] = lambda health: True, timeout: float = 180,
                    proc: subprocess.Popen | None = None) -> float:
    """Poll ``url``/health until it answers 200 with a body ``ready`` accepts; the seconds it took.
    Raises SystemExit on ``timeout`` or when ``proc`` has exited."""
    import httpx

    start = time.monotonic()
    while True:
        with contextlib.suppress(httpx.TransportError, ValueError):
            answer = httpx.get(url + "/health", timeout=5)
            if answer.status_code == 200 and ready(answer.json()):
                return time.monotonic() - start
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode} before {url}/health was ready")
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting on {url}/health")
        time.sleep(0.2)


@contextlib.contextmanager
def running_app(args: tuple[str, ...] = (), env: dict[str, str] | None = None, python: str | Path = sys.executable,
                timeout: float = 180, stdout: Any = None, ready: Callable[[dict], bool] = lambda health: True
                ) -> Iterator[App]:
    """Start ``app.py`` on a free loopback port with ``args`` and ``env`` (added to this process's
    environment; a value of ``None`` removes the name), wait until /health is ``ready``, and stop
    it (terminate, then kill after 20 s) when the block ends."""
    port = free_port()
    merged = {**os.environ, "COSYEDGE_LOG_LEVEL": "WARNING", "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
    merged = {name: value for name, value in merged.items() if value is not None}
    proc = subprocess.Popen([str(python), "app.py", "--port", str(port), *args], cwd=ROOT, env=merged,
                            stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None)
    app = App(proc, f"http://127.0.0.1:{port}")
    try:
        wait_for_health(app.url, ready, timeout, proc)
        yield app
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the lab log ---------------------------------------------------------------------------------------


def _lab_log_path(value: str) -> Path:
    path = Path(value)
    if path.resolve() == CURRENT.resolve():
        raise argparse.ArgumentTypeError(
            "docs/benchmarks.md holds the current figures only: record the round in docs/bench-log/ "
            "(--write alone picks this bench's file) and update the rows it names by hand")
    return path


def add_write_option(parser: argparse.ArgumentParser, log: Path, *aliases: str) -> None:
    """``--write [LOG]``: record this run's tables as a new round in a lab-log file (``log`` by default).
    Checked before the run, so a long bench never ends in a refused path."""
    parser.add_argument("--write", *aliases, nargs="?", const=log, type=_lab_log_path, metavar="LOG",
                        help=f"record the round in this lab-log file (default {log.relative_to(ROOT)})")


def record_round(log: Path, section: str, key: str, started: dt.datetime, body: str, current_rows: str) -> str:
    """Append ``body`` to ``log`` as a round of ``section`` under its own dated heading (older rounds
    stay: the lab log is history), and say which rows of docs/benchmarks.md to update from it.
    Returns the heading."""
    if log.resolve() == CURRENT.resolve():
        raise ValueError("docs/benchmarks.md holds the current figures only; record rounds in docs/bench-log/")
    title = f"{section}: `{key}`, run of {started:%Y-%m-%d %H:%M} UTC"
    text = log.read_text(encoding="utf-8") if log.exists() else f"# {log.stem}: lab log\n"
    log.write_text(f"{text.rstrip()}\n\n## {title}\n\n{body.strip()}\n", encoding="utf-8")
    print(f"Recorded under '## {title}' in {log}.\nNow update in docs/benchmarks.md (by hand, one row per "
          f"figure, linking that heading): {current_rows}", file=sys.stderr)
    return title
