"""Time to first audio on the embedded Kokoro engine: engine first chunk, and HTTP first byte.

    .venv/bin/python bench/first_audio.py                         # both tables, printed as markdown
    .venv/bin/python bench/first_audio.py --write                 # recorded in docs/bench-log/kokoro.md

Engine table (one process, engine loaded, G2P warm): for each text of bench/kokoro_rtf.py and each
first-chunk limit (``KokoroFrontend.first_chunk_phonemes``; 0 = the old whole first sentence), the
time from ``engine.synthesize`` to the first chunk (wall and process CPU), that chunk's phonemes and
audio length, and the *stall*: how long a player that starts with the first chunk would wait for
the second (second chunk ready - (first ready + first chunk's audio + its pause), if positive). The
limits' runs are interleaved, so a busy machine slows them alike; compare CPU ms when loaded.

HTTP table: a real ``app.py`` (subprocess, 2 threads, model loaded by a warm-up request); per text
the time to the first byte of ``/v1/audio/speech`` with ``stream_format: "audio"`` (pcm; the client
then closes, which cancels the job) and the time to the whole non-streamed WAV (what a client
waited before streaming).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import LOG_DIR, add_write_option, load_average, measured_header, record_round, running_app  # noqa: E402
from bench.kokoro_rtf import TEXTS, VOICE  # noqa: E402
from bench.machine_speed import speed_line  # noqa: E402
from cosyedge.audio import SENTENCE_PAUSE_S  # noqa: E402
from cosyedge.config import from_env  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro.engine import KokoroEngine  # noqa: E402

SECTION_KEYS = ("engine", "http")
#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTION = "First audio: short first chunk and streaming (`bench/first_audio.py`)"
CURRENT_ROWS = {"engine": "'Embedded engine: Kokoro-82M int8' table: 'first chunk at limit 40, all nine texts'",
                "http": "'Embedded engine: Kokoro-82M int8' table: 'HTTP, streamed first byte'"}


def engine_rows(threads: int, limits: list[int], reps: int) -> list[dict]:
    engine = KokoroEngine.load(ROOT / "models" / "kokoro-int8", from_env(onnx_threads=threads))
    frontend = engine.frontend
    sr = engine.capabilities.sample_rate
    engine.infer(frontend.token_ids(frontend.sentences("Hi.", "en")[0].phonemes), engine.style_pack(VOICE), 1.0)
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for _ in range(reps):
        for lang, sizes in TEXTS.items():
            for size, text in sizes.items():
                for limit in limits:
                    frontend.first_chunk_phonemes = limit
                    t0 = time.perf_counter()
                    sentences = frontend.sentences(text, lang)
                    g2p_s = time.perf_counter() - t0
                    t0, c0 = time.perf_counter(), time.process_time()
                    chunks = engine.synthesize(text, VOICE, SynthesisOptions(language=lang))
                    first = next(chunks)
                    t1, c1 = time.perf_counter() - t0, time.process_time() - c0
                    second = next(chunks, None)
                    t2 = time.perf_counter() - t0
                    chunks.close()
                    dur1 = first.audio.size / sr
                    pause = SENTENCE_PAUSE_S if first.pause_after_s is None else first.pause_after_s
                    stall = max(0.0, t2 - (t1 + dur1 + pause)) if second is not None else 0.0
                    runs.setdefault((lang, size, limit), []).append(
                        {"wall": t1, "cpu": c1, "g2p": g2p_s, "stall": stall, "audio": dur1,
                         "phonemes": len(sentences[0].phonemes), "text": sentences[0].text})
    rows = []
    for (lang, size, limit), rs in runs.items():
        rows.append({"lang": lang, "size": size, "limit": limit, "phonemes": rs[0]["phonemes"],
                     "audio": rs[0]["audio"], "text": rs[0]["text"],
                     "wall": statistics.median(r["wall"] for r in rs),
                     "cpu": statistics.median(r["cpu"] for r in rs),
                     "g2p": statistics.median(r["g2p"] for r in rs),
                     "stall": statistics.median(r["stall"] for r in rs)})
    engine.close()
    return rows


def engine_table(rows: list[dict], threads: int, reps: int) -> str:
    intro = (f"{threads} intra-op threads, voice `{VOICE}`, median of {reps}; first chunk = the call to the "
             "first chunk's audio (frontend for the whole text included); frontend = `frontend.sentences` "
             "alone; stall = wait for the second chunk of a player that starts with the first.")
    lines = [intro, "",
             "| lang | text | first-chunk limit | first chunk phonemes | first chunk audio s | first chunk ms "
             "| first chunk CPU ms | frontend ms | stall before chunk 2 ms | first chunk text |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        limit = "off (whole sentence)" if r["limit"] == 0 else str(r["limit"])
        lines.append(f"| {r['lang']} | {r['size']} | {limit} | {r['phonemes']} | {r['audio']:.2f} "
                     f"| {r['wall'] * 1000:.0f} | {r['cpu'] * 1000:.0f} | {r['g2p'] * 1000:.0f} "
                     f"| {r['stall'] * 1000:.0f} | {r['text'][:40]} |")
    return "\n".join(lines)


def http_rows(threads: int, reps: int) -> list[dict]:
    with running_app(("--onnx-threads", str(threads)), {"COSYEDGE_IDLE_UNLOAD_MINUTES": "0"}) as app:
        url = app.url
        speech = url + "/v1/audio/speech"
        warm = {"model": "tts-1", "input": "Hi.", "voice": VOICE, "response_format": "wav"}
        httpx.post(speech, json=warm, timeout=300).raise_for_status()  # loads the model
        for lang, sizes in TEXTS.items():  # G2P dictionaries
            httpx.post(speech, json={**warm, "input": sizes["short"]}, timeout=300).raise_for_status()
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(reps):
            for lang, sizes in TEXTS.items():
                for size, text in sizes.items():
                    body = {"model": "tts-1", "input": text, "voice": VOICE}
                    t0 = time.perf_counter()
                    with httpx.stream("POST", speech, json={**body, "response_format": "pcm",
                                                            "stream_format": "audio"}, timeout=300) as r:
                        r.raise_for_status()
                        next(r.iter_raw())
                        first = time.perf_counter() - t0
                        job_id = r.headers["x-cosyedge-job-id"]
                    # closing cancelled the job; let it finish its current chunk before timing more
                    while httpx.get(f"{url}/jobs/{job_id}", timeout=30).json()["state"] in ("waiting", "running"):
                        time.sleep(0.05)
                    t0 = time.perf_counter()
                    httpx.post(speech, json={**body, "response_format": "wav"}, timeout=600).raise_for_status()
                    whole = time.perf_counter() - t0
                    runs.setdefault((lang, size), []).append({"first": first, "whole": whole})
    return [{"lang": lang, "size": size, "first": statistics.median(r["first"] for r in rs),
             "whole": statistics.median(r["whole"] for r in rs)} for (lang, size), rs in runs.items()]


def http_table(rows: list[dict], threads: int, reps: int) -> str:
    intro = (f"`app.py` with {threads} ONNX threads, one client at a time, median of {reps}; streamed = "
             "`/v1/audio/speech` pcm with `stream_format: \"audio\"`, time to the first body byte; whole "
             "= the same request as wav without streaming, time to the complete answer.")
    lines = [intro, "",
             "| lang | text | streamed: first byte ms | not streamed: whole answer ms |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['lang']} | {r['size']} | {r['first'] * 1000:.0f} | {r['whole'] * 1000:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limits", type=int, nargs="+", default=[0, 40],
                        help="first-chunk limits in phonemes to compare (0 = off)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--only", choices=SECTION_KEYS, help="run one table only")
    add_write_option(parser, LAB_LOG)
    args = parser.parse_args(argv)
    from cosyedge.host.heap import return_large_blocks

    return_large_blocks()  # as the server does (Service.start): the product's memory behaviour
    command = "python bench/first_audio.py " + " ".join(argv if argv is not None else sys.argv[1:])
    blocks, started_at = {}, {}
    for key in SECTION_KEYS:
        if args.only not in (None, key):
            continue
        started, before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
        if key == "engine":
            body = engine_table(engine_rows(args.threads, args.limits, args.reps), args.threads, args.reps)
        else:
            body = http_table(http_rows(args.threads, args.reps), args.threads, args.reps)
        blocks[key] = f"{measured_header(started, command, before, speed_before)}\n\n{body}"
        started_at[key] = started
        print(blocks[key] + "\n", flush=True)
    if args.write:
        for key, text in blocks.items():
            record_round(args.write, SECTION, key, started_at[key], text, CURRENT_ROWS[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
