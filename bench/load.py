"""Concurrent load on one server: /tts, /v1/audio/speech and the Gradio API mixed, bounded and local.

    .venv/bin/python bench/load.py                          # embedded Kokoro engine, 24 clients
    .venv/bin/python bench/load.py --engine fake --delay 0.3 --clients 32 --requests 400

Starts the app in this process on 127.0.0.1:<free port> (only loopback traffic), wraps the engine
so the number of syntheses running at once is counted where it happens, and polls /health for the
queue's own view. Every client stops after ``--requests`` requests in all or ``--max-seconds``,
whichever comes first. Prints one JSON report: max running at once (engine and /health), 200s,
429s (each checked for Retry-After), other errors, p50/p95 latency per route, and the queue's own
record of each refusal's Retry-After beside the wait it turned out to be (``retry_after``: until the
jobs then ahead let a new job start; ``retry_figures``).

``run_load`` is the driver; tests/system/load/ calls it with CI-sized numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench.load")

ROUTES = ("tts", "speech", "gradio")
TEXTS = ("Good morning, class.", "今天天气真好。", "Read page four.", "こんにちは。",
         "[zh]你好[en]hello there.", "One. Two. Three.")


class CountingEngine:
    """Wraps an engine; ``peak`` is the most ``synthesize`` generators running at once."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.model_id = inner.model_id
        self.capabilities = inner.capabilities
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.calls = 0

    def presets(self) -> list[str]:
        return self.inner.presets()

    def encode_prompt(self, audio: Any, sample_rate: int, transcript: str | None) -> Any:
        return self.inner.encode_prompt(audio, sample_rate, transcript)

    def analyze(self, text: str, language: str = "auto") -> Any:
        return self.inner.analyze(text, language)

    def synthesize(self, text: Any, voice: Any, options: Any, progress: Any = None,
                   cancelled: Any = None) -> Iterator[Any]:
        with self._lock:
            self.active += 1
            self.calls += 1
            self.peak = max(self.peak, self.active)
        try:
            yield from self.inner.synthesize(text, voice, options, progress=progress,
                                             cancelled=cancelled)
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        self.inner.close()


@dataclass
class Outcome:
    route: str
    status: int  # HTTP code; for Gradio 200 = result, 429 = busy error, 0 = other error
    seconds: float
    retry_after: str | None = None
    message: str = ""


@dataclass
class LoadReport:
    """What a load run saw; ``as_dict()`` is the printed JSON."""

    outcomes: list[Outcome] = field(default_factory=list)
    health_max_running: int = 0
    health_max_waiting: int = 0
    health_samples: int = 0
    engine_peak: int | None = None
    wall_s: float = 0.0
    healthy_after: bool = False

    def by_status(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        return counts

    def busy(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == 429]

    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status not in (200, 429)]

    def latency(self, route: str | None = None) -> dict[str, float | None]:
        times = sorted(o.seconds for o in self.outcomes
                       if o.status == 200 and (route is None or o.route == route))
        if not times:
            return {"n": 0, "p50": None, "p95": None, "max": None}
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        return {"n": len(times), "p50": round(statistics.median(times), 3), "p95": round(p95, 3),
                "max": round(times[-1], 3)}

    def as_dict(self) -> dict[str, Any]:
        busy = self.busy()
        return {"requests": len(self.outcomes), "wall_s": round(self.wall_s, 1),
                "status_counts": {str(k): v for k, v in sorted(self.by_status().items())},
                "busy_429": len(busy),
                "busy_with_retry_after": sum(1 for o in busy if o.retry_after),
                "busy_gradio_queue_full": sum(1 for o in busy if "queue is full" in o.message.lower()),
                "errors": [f"{o.route} {o.status}: {o.message[:160]}" for o in self.errors()][:20],
                "max_running_engine": self.engine_peak,
                "max_running_health": self.health_max_running,
                "max_waiting_health": self.health_max_waiting,
                "health_samples": self.health_samples,
                "latency_all": self.latency(),
                **{f"latency_{r}": self.latency(r) for r in ROUTES},
                "healthy_after": self.healthy_after}


def _rest_call(client: httpx.Client, route: str, text: str) -> Outcome:
    started = time.monotonic()
    if route == "tts":
        r = client.post("/tts", json={"text": text, "speaker": "female_1"})
    else:
        r = client.post("/v1/audio/speech", json={"model": "tts-1", "input": text,
                                                  "voice": "female_1", "response_format": "wav"})
    seconds = time.monotonic() - started
    message = ""
    if r.status_code != 200:
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text[:200]
    elif route == "tts" and not r.json().get("audio"):
        return Outcome(route, 0, seconds, message="200 without audio")
    elif route == "speech" and r.content[:4] != b"RIFF":
        return Outcome(route, 0, seconds, message="200 without a WAV body")
    return Outcome(route, r.status_code, seconds, r.headers.get("retry-after"), message)


def _gradio_call(client: Any, text: str) -> Outcome:
    """One call of the preset tab's handler; Gradio reports busy as an error toast, not a code."""
    started = time.monotonic()
    try:
        # (file, panel, caption files, live-player URL)
        path, panel, _captions, _live = client.predict("female_1", text, 1.0, "auto", None, api_name="/preset")
    except Exception as exc:  # gradio_client raises AppError (and others) for handler errors
        seconds = time.monotonic() - started
        message = str(exc)
        if "busy" in message.lower():
            retry = "retry in" in message and message.split("retry in about")[-1].split()[0]
            return Outcome("gradio", 429, seconds, retry or None, message)
        if "queue is full" in message.lower():  # Gradio's own queue (capacity 10) said busy first
            return Outcome("gradio", 429, seconds, None, message)
        return Outcome("gradio", 0, seconds, message=f"{type(exc).__name__}: {message}")
    seconds = time.monotonic() - started
    if not path or not Path(path).is_file() or Path(path).stat().st_size <= 44:
        return Outcome("gradio", 0, seconds, message=f"no audio file in the result ({path!r})")
    return Outcome("gradio", 200, seconds, message=panel[:60])


def run_load(url: str, clients: int, requests: int, max_seconds: float,
             routes: tuple[str, ...] = ROUTES, headers: dict[str, str] | None = None,
             engine: CountingEngine | None = None, timeout: float = 300.0) -> LoadReport:
    """``clients`` threads take turns over ``routes`` until ``requests`` are sent or time is up."""
    report = LoadReport()
    deadline = time.monotonic() + max_seconds
    counter = itertools.count()
    lock = threading.Lock()
    stop_polling = threading.Event()
    start_gate = threading.Barrier(clients)

    def poll_health() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
            while not stop_polling.is_set():
                try:
                    queue = http.get("/health").json()["queue"]
                    report.health_max_running = max(report.health_max_running, queue["running"])
                    report.health_max_waiting = max(report.health_max_waiting, queue["waiting"])
                    report.health_samples += 1
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                stop_polling.wait(0.05)

    def client_loop(index: int) -> None:
        gradio = None
        if "gradio" in routes:
            from gradio_client import Client

            gradio = Client(url, headers=headers, verbose=False, download_files=str(_tmp_dir()),
                            analytics_enabled=False)  # no telemetry: this box has no network
        try:
            _client_requests(index, gradio)
        finally:
            if gradio is not None:
                gradio.close()

    def _client_requests(index: int, gradio: Any) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=timeout) as http:
            start_gate.wait()
            while time.monotonic() < deadline:
                n = next(counter)
                if n >= requests:
                    return
                route = routes[(n + index) % len(routes)]
                text = TEXTS[n % len(TEXTS)]
                try:
                    outcome = (_gradio_call(gradio, text) if route == "gradio"
                               else _rest_call(http, route, text))
                except httpx.HTTPError as exc:
                    outcome = Outcome(route, 0, 0.0, message=f"{type(exc).__name__}: {exc}")
                with lock:
                    report.outcomes.append(outcome)
                if outcome.status == 429:  # back off as told, at most 2 s (keeps the pressure on)
                    time.sleep(min(2.0, float(outcome.retry_after or 1)))

    poller = threading.Thread(target=poll_health, name="load-health", daemon=True)
    poller.start()
    started = time.monotonic()
    with ThreadPoolExecutor(clients, thread_name_prefix="load-client") as pool:
        for future in [pool.submit(client_loop, i) for i in range(clients)]:
            future.result()
    report.wall_s = time.monotonic() - started
    stop_polling.set()
    poller.join(5)
    if engine is not None:
        report.engine_peak = engine.peak
    try:
        health = httpx.get(f"{url}/health", headers=headers, timeout=10).json()
        report.healthy_after = (health["status"] == "ok" and health["queue"]["running"] == 0
                                and health["queue"]["waiting"] == 0)
    except (httpx.HTTPError, ValueError, KeyError):
        report.healthy_after = False
    return report


def retry_figures(answers: list[Any]) -> dict[str, Any]:
    """Retry-After against the real wait, from ``JobQueue.busy_answers()`` (those whose wait is
    known): medians, the median and worst ratio, and how many overstated or understated by more
    than 2 s."""
    known = [a for a in answers if a.actual_s is not None]
    if not known:
        return {"n": 0, "refusals": len(answers)}
    ratios = sorted(a.retry_after / max(a.actual_s, 1.0) for a in known)  # a wait under 1 s counts as 1 s
    return {"n": len(known), "refusals": len(answers),
            "median_retry_after_s": statistics.median(a.retry_after for a in known),
            "median_estimate_s": round(statistics.median(a.estimate_s for a in known), 2),
            "median_actual_wait_s": round(statistics.median(a.actual_s for a in known), 2),
            "median_ratio": round(statistics.median(ratios), 2),
            "ratio_p10_p90": [round(ratios[int(0.1 * (len(ratios) - 1))], 2),
                              round(ratios[int(0.9 * (len(ratios) - 1))], 2)],
            "over_by_2s_or_more": sum(1 for a in known if a.retry_after - a.actual_s >= 2),
            "under_by_2s_or_more": sum(1 for a in known if a.actual_s - a.retry_after >= 2)}


_TMP: list[Path] = []


def _tmp_dir() -> Path:
    """One scratch folder per process for the files gradio_client downloads."""
    import tempfile

    if not _TMP:
        _TMP.append(Path(tempfile.mkdtemp(prefix="cosyedge-load-")))
    return _TMP[0]


def counting_factory(inner_factory: Callable[[], Any]) -> tuple[Callable[[], Any], list]:
    """An engine factory whose engines are wrapped in CountingEngine (kept in the returned list)."""
    made: list[CountingEngine] = []

    def factory() -> CountingEngine:
        engine = CountingEngine(inner_factory())
        made.append(engine)
        return engine

    return factory, made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("kokoro", "fake"), default="kokoro")
    parser.add_argument("--delay", type=float, default=0.3, help="fake engine: seconds per sentence")
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--routes", default=",".join(ROUTES))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import dataclasses
    import tempfile

    from app import build_app
    from cosyedge import config
    from cosyedge.service.facade import Service
    from tests.helpers.live_server import LiveServer

    root = Path(tempfile.mkdtemp(prefix="cosyedge-loadbench-"))
    (root / "outputs").mkdir()
    settings = dataclasses.replace(config.from_env({}), root=root, models_dir=ROOT / "models",
                                   idle_unload_minutes=0).validate()
    if args.engine == "fake":
        from tests.helpers.fake_engine import FakeEngine

        inner: Callable[[], Any] = lambda: FakeEngine(delay=args.delay)  # noqa: E731
    else:
        from cosyedge.engines.loader import load_engine

        inner = lambda: load_engine(settings)  # noqa: E731
    factory, made = counting_factory(inner)
    service = Service(settings, engine_factory=factory)
    service.start()
    server = LiveServer(build_app(service, with_ui=True)).start()
    try:
        httpx.post(f"{server.url}/tts", json={"text": "warm up."}, timeout=600).raise_for_status()
        routes = tuple(r for r in args.routes.split(",") if r)
        report = run_load(server.url, args.clients, args.requests, args.max_seconds, routes,
                          engine=made[0] if made else None)
        retry = retry_figures(service.queue.busy_answers())
    finally:
        server.stop()
        service.close()
    result = {"engine": args.engine, "clients": args.clients, "requests_cap": args.requests,
              "max_seconds": args.max_seconds, **report.as_dict(), "retry_after": retry}
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0 if not report.errors() and report.healthy_after else 1


if __name__ == "__main__":
    sys.exit(main())
