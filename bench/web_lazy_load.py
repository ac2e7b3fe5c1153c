"""Lazy load and idle unload of the real server: start time, first-job time, RSS at each step.

    .venv/bin/python bench/web_lazy_load.py [--idle-minutes 0.1]

Starts `python app.py` on a free port with the embedded engine and prints a Markdown table, with
the machine and the load average before and after, for a round in docs/bench-log/service-and-web.md
("Web app: lazy load and idle unload"); the rows to update in docs/benchmarks.md are the 'Service and
web on the embedded engine' table's first four.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_model, load_average, running_app, wait_for_health  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-minutes", type=float, default=0.1)
    args = parser.parse_args()
    load_before = load_average()
    rows: list[tuple[str, str]] = []
    started = time.monotonic()
    with running_app(env={"COSYEDGE_IDLE_UNLOAD_MINUTES": str(args.idle_minutes)},
                     ready=lambda health: health["status"] == "ok") as app:
        def rss() -> float:
            return psutil.Process(app.proc.pid).memory_info().rss / 2**20

        page = httpx.get(app.url + "/", timeout=60)
        page.raise_for_status()
        rows.append(("start to page served (s)", f"{time.monotonic() - started:.1f}"))
        rows.append(("RSS at start, nothing loaded (MB)", f"{rss():.0f}"))
        for cycle in (1, 2):
            t0 = time.monotonic()
            r = httpx.post(app.url + "/tts", json={"text": "[zh]今天天气真好[en]It's sunny today",
                                                   "speaker": "female_1"}, timeout=600)
            r.raise_for_status()
            rows.append((f"cycle {cycle}: first job incl. model load (s)",
                         f"{time.monotonic() - t0:.1f}"))
            rows.append((f"cycle {cycle}: RSS with model loaded (MB)", f"{rss():.0f}"))
            wait_for_health(app.url, lambda h: h["model_state"] == "not loaded", args.idle_minutes * 60 + 120)
            rows.append((f"cycle {cycle}: RSS after idle unload (MB)", f"{rss():.0f}"))
    print(f"{cpu_model()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load_before} "
          f"before / {load_average()} after.\n")
    print("| step | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
