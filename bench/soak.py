"""Soak: hundreds of jobs on the real embedded engine while the server's RSS is sampled.

    .venv/bin/python bench/soak.py                       # 500 jobs: 250 sequential, 250 by 4 clients
    .venv/bin/python bench/soak.py --jobs 100 --max-minutes 5

Starts ``python app.py`` (embedded Kokoro engine, never unloaded) on 127.0.0.1:<free port> in a
fresh outputs/ folder, runs a warm-up, then the sequential half, then the concurrent half (REST
/tts, /v1/audio/speech and, every ``--gradio-every`` job, the Gradio API, which writes outputs/).
RSS of the server process (children, such as the espeak worker, reported apart) is sampled every
second. Stops after ``--jobs`` jobs or ``--max-minutes``, whichever is first, and prints JSON:
jobs done per phase, errors, RSS after warm-up / max / end, growth, latency.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import running_app  # noqa: E402

TEXTS = ("Good morning, class.", "今天天气真好。", "Read page four, please.", "こんにちは、元気ですか。",
         "[zh]你好[en]hello there.", "One. Two. Three.", "The cat sat on the mat.", "我们开始上课吧。")


class RssSampler(threading.Thread):
    """Samples the server's RSS (MiB) and its children's, once a second, with the jobs done so far."""

    def __init__(self, pid: int, done: "itertools.count[int]") -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.proc = psutil.Process(pid)
        self.samples: list[tuple[float, float, float, int]] = []  # (t, rss, children rss, jobs)
        self.jobs_done = 0
        self.stop = threading.Event()

    def sample(self) -> tuple[float, float]:
        rss = self.proc.memory_info().rss / 2**20
        children = sum(c.memory_info().rss for c in self.proc.children(recursive=True)) / 2**20
        return rss, children

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.wait(1.0):
            try:
                rss, children = self.sample()
            except psutil.Error:
                return
            self.samples.append((time.monotonic() - start, rss, children, self.jobs_done))


def one_job(http: httpx.Client, gradio: object | None, n: int) -> tuple[str, int, float]:
    """(route, status, seconds) of job number ``n``."""
    text = TEXTS[n % len(TEXTS)]
    started = time.monotonic()
    if gradio is not None:
        try:
            gradio.predict("female_1", text, 1.0, "auto", None, api_name="/preset")  # type: ignore[attr-defined]
            status = 200
        except Exception as exc:  # noqa: BLE001 - record and go on
            status = 429 if "busy" in str(exc).lower() else 0
        return "gradio", status, time.monotonic() - started
    if n % 2:
        r = http.post("/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "female_1",
                                                "response_format": "wav"})
        ok = r.status_code == 200 and r.content[:4] == b"RIFF"
        return "speech", r.status_code if ok or r.status_code != 200 else 0, time.monotonic() - started
    r = http.post("/tts", json={"text": text, "speaker": "female_1"})
    ok = r.status_code == 200 and bool(r.json().get("audio"))
    return "tts", r.status_code if ok or r.status_code != 200 else 0, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="after warm-up; half sequential")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--warmup-clients", type=int, default=1,
                        help="2 = warm up with concurrent jobs (reaches ONNX Runtime's arena peak)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--gradio-every", type=int, default=10, help="0 = REST only")
    parser.add_argument("--max-minutes", type=float, default=30)
    parser.add_argument("--samples-csv", type=Path, help="write every RSS sample here")
    args = parser.parse_args()

    from gradio_client import Client

    work = Path(tempfile.mkdtemp(prefix="cosyedge-soak-"))
    env = {"COSYEDGE_IDLE_UNLOAD_MINUTES": "0", "COSYEDGE_OUTPUTS_DIR": str(work / "outputs"),
           "COSYEDGE_PROMPTS_DIR": str(work / "prompts"), "COSYEDGE_MODELS_DIR": str(ROOT / "models")}
    results: dict[str, list[tuple[str, int, float]]] = {"warmup": [], "sequential": [], "concurrent": []}
    with running_app(env=env) as app:
        url = app.url
        deadline = time.monotonic() + args.max_minutes * 60
        sampler = RssSampler(app.proc.pid, itertools.count())
        try:
            sampler.start()
            http = httpx.Client(base_url=url, timeout=300)
            gradio = Client(url, verbose=False, download_files=str(work / "downloads"),
                            analytics_enabled=False)
            counter = itertools.count()

            def run_phase(name: str, count: int, clients: int) -> None:
                claimed = itertools.count()

                def worker(_: int) -> None:
                    with httpx.Client(base_url=url, timeout=300) as own:
                        while time.monotonic() < deadline:
                            if next(claimed) >= count:
                                return
                            n = next(counter)
                            use_gradio = args.gradio_every and n % args.gradio_every == 0
                            results[name].append(one_job(own, gradio if use_gradio else None, n))
                            sampler.jobs_done += 1
                if clients == 1:
                    worker(0)
                else:
                    with ThreadPoolExecutor(clients) as pool:
                        list(pool.map(worker, range(clients)))

            run_phase("warmup", args.warmup, args.warmup_clients)
            after_warmup = sampler.sample()[0]
            run_phase("sequential", args.jobs // 2, 1)
            after_sequential = sampler.sample()[0]
            run_phase("concurrent", args.jobs - args.jobs // 2, args.clients)
            time.sleep(2)
            end_rss, end_children = sampler.sample()
            gradio.close()
            http.close()
        finally:
            sampler.stop.set()
    if args.samples_csv:
        args.samples_csv.write_text("t_s,rss_mib,children_rss_mib,jobs_done\n" + "".join(
            f"{t:.1f},{r:.1f},{c:.1f},{j}\n" for t, r, c, j in sampler.samples))
    rss_after = [r for _, r, _, j in sampler.samples if j >= args.warmup]
    outputs = list((work / "outputs").glob("*"))
    summary = {
        "jobs": {k: len(v) for k, v in results.items()},
        "status_counts": {k: {str(s): sum(1 for _, st, _ in v if st == s) for s in {st for _, st, _ in v}}
                          for k, v in results.items()},
        "latency_s": {k: {"p50": round(statistics.median(t), 3),
                          "p95": round(sorted(t)[int(0.95 * (len(t) - 1))], 3)}
                      for k, v in results.items() if (t := [s for _, st, s in v if st == 200])},
        "rss_mib": {"after_warmup": round(after_warmup, 1), "after_sequential": round(after_sequential, 1),
                    "max_after_warmup": round(max(rss_after, default=0.0), 1), "end": round(end_rss, 1),
                    "growth_after_warmup": round(end_rss - after_warmup, 1),
                    "children_end": round(end_children, 1)},
        "samples": len(sampler.samples),
        "outputs_files": len(outputs),
        "outputs_tmp_left": sum(1 for p in outputs if p.name.startswith(".tmp-")),
        "finished_in_time": time.monotonic() < deadline,
    }
    print(json.dumps(summary, indent=1))
    errors = sum(1 for v in results.values() for _, st, _ in v if st not in (200, 429))
    return 0 if errors == 0 and summary["rss_mib"]["growth_after_warmup"] < 50 else 1


if __name__ == "__main__":
    sys.exit(main())
