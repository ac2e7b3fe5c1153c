"""Lazy load and idle unload of the real server: start time, first-job time, RSS at each step.

    .venv/bin/python bench/web_lazy_load.py [--idle-minutes 0.1]

Starts `python app.py` on a free port with the embedded engine and prints a Markdown table for
docs/benchmarks.md. Run `uptime` before and after and record the load with the figures.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(url: str, predicate, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate(httpx.get(url + "/health", timeout=5).json()):
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting on {url}/health")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle-minutes", type=float, default=0.1)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "COSYEDGE_IDLE_UNLOAD_MINUTES": str(args.idle_minutes),
           "COSYEDGE_LOG_LEVEL": "WARNING"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env)

    def rss() -> float:
        return psutil.Process(proc.pid).memory_info().rss / 2**20

    rows: list[tuple[str, str]] = []
    try:
        wait(url, lambda h: h["status"] == "ok", 180)
        page = httpx.get(url + "/", timeout=60)
        page.raise_for_status()
        rows.append(("start to page served (s)", f"{time.monotonic() - started:.1f}"))
        rows.append(("RSS at start, nothing loaded (MB)", f"{rss():.0f}"))
        for cycle in (1, 2):
            t0 = time.monotonic()
            r = httpx.post(url + "/tts", json={"text": "[zh]今天天气真好[en]It's sunny today",
                                               "speaker": "female_1"}, timeout=600)
            r.raise_for_status()
            rows.append((f"cycle {cycle}: first job incl. model load (s)",
                         f"{time.monotonic() - t0:.1f}"))
            rows.append((f"cycle {cycle}: RSS with model loaded (MB)", f"{rss():.0f}"))
            wait(url, lambda h: h["model_state"] == "not loaded", args.idle_minutes * 60 + 120)
            rows.append((f"cycle {cycle}: RSS after idle unload (MB)", f"{rss():.0f}"))
    finally:
        proc.terminate()
        proc.wait(15)
    print("| step | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
