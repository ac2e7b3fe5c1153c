"""Wyoming latency on the embedded Kokoro engine: from ``synthesize`` to the first ``audio-chunk``
and to ``audio-stop``, for a short and a long sentence, measured with the ``wyoming`` package's
own client against the app's Wyoming server (same service and job queue as the page).

    .venv/bin/python bench/wyoming_latency.py                    # prints a markdown table
    .venv/bin/python bench/wyoming_latency.py --write             # recorded in docs/bench-log/service-and-web.md

The model is loaded (and its G2P warmed) by one request before timing; the two sentences are then
asked in turn ``--reps`` times each (interleaved, so a busy box slows both alike), one request at a
time over a fresh connection, as Home Assistant does.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import LOG_DIR, add_write_option, free_port, load_average, measured_header, record_round  # noqa: E402
from bench.machine_speed import speed_line  # noqa: E402

SENTENCES = {
    "short": "Good morning, class.",
    "long": ("This afternoon we will read the second chapter together, and after the break each of "
             "you will tell the class, in your own words, what you think the old fisherman wanted "
             "most of all."),
}

#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "service-and-web.md"
SECTION = "Wyoming latency (issue 23)"
CURRENT_ROWS = "'Service and web on the embedded engine' table: the two 'Wyoming' rows"


async def one_request(port: int, text: str) -> dict:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error
    from wyoming.tts import Synthesize, SynthesizeVoice

    async with AsyncTcpClient("127.0.0.1", port, read_timeout=120) as client:
        started = time.perf_counter()
        await client.write_event(Synthesize(text=text, voice=SynthesizeVoice(name="female_1")).event())
        first = None
        samples, rate = 0, 0
        while True:
            event = await client.read_event()
            if event is None:
                raise RuntimeError("the server closed the connection")
            if Error.is_type(event.type):
                raise RuntimeError(Error.from_event(event).text)
            if AudioStart.is_type(event.type):
                rate = AudioStart.from_event(event).rate
            if AudioChunk.is_type(event.type):
                if first is None:
                    first = time.perf_counter() - started
                samples += len(AudioChunk.from_event(event).audio) // 2
            if AudioStop.is_type(event.type):
                return {"first_s": first, "stop_s": time.perf_counter() - started,
                        "audio_s": samples / rate if rate else 0.0}


def measure(reps: int, threads: int) -> list[dict]:
    import dataclasses

    from cosyedge.config import from_env
    from cosyedge.service.facade import Service
    from cosyedge.web.wyoming_server import WyomingServer, WyomingSettings

    settings = dataclasses.replace(from_env(), models_dir=ROOT / "models", onnx_threads=threads,
                                   idle_unload_minutes=0)
    service = Service(settings)
    service.start()
    server = WyomingServer(service, WyomingSettings(port=free_port())).start()
    try:
        port = server.settings.port
        loaded = time.perf_counter()
        asyncio.run(one_request(port, "Hello."))  # loads the model, warms G2P
        load_s = time.perf_counter() - loaded
        runs: dict[str, list[dict]] = {name: [] for name in SENTENCES}
        for _ in range(reps):
            for name, text in SENTENCES.items():
                runs[name].append(asyncio.run(one_request(port, text)))
    finally:
        server.stop()
        service.close()
    rows = []
    for name, results in runs.items():
        rows.append({"text": name, "chars": len(SENTENCES[name]), "audio_s": results[0]["audio_s"],
                     "first": [r["first_s"] for r in results], "stop": [r["stop_s"] for r in results],
                     "load_s": load_s})
    return rows


def table(rows: list[dict], reps: int, threads: int) -> str:
    lines = [f"ONNX threads {threads}; {reps} runs per sentence, interleaved; the first request (model "
             f"load + warm-up) took {rows[0]['load_s']:.1f} s and is not counted.", "",
             "| sentence | chars | audio s | first audio-chunk ms (median / best / worst) "
             "| audio-stop s (median / best / worst) | RTF at audio-stop (median) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        first, stop = r["first"], r["stop"]
        lines.append(f"| {r['text']} | {r['chars']} | {r['audio_s']:.2f} | {statistics.median(first) * 1000:.0f} / "
                     f"{min(first) * 1000:.0f} / {max(first) * 1000:.0f} | {statistics.median(stop):.2f} / "
                     f"{min(stop):.2f} / {max(stop):.2f} | {statistics.median(stop) / r['audio_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    add_write_option(parser, LAB_LOG)
    args = parser.parse_args(argv)
    started, load_before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
    rows = measure(args.reps, args.threads)
    command = "flock /work/locks/heavy .venv/bin/python bench/wyoming_latency.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    body = measured_header(started, command, load_before, speed_before) + "\n\n" + table(
        rows, args.reps, args.threads)
    print(body)
    if args.write:
        record_round(args.write, SECTION, "latency", started, body, CURRENT_ROWS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
