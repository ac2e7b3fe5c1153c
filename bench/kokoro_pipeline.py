"""Two Kokoro calls in flight (issue 2): sequential vs pipelined engine, side by side; memory.

    .venv/bin/python bench/kokoro_pipeline.py                        # both tables, printed as markdown
    .venv/bin/python bench/kokoro_pipeline.py --write             # recorded in docs/bench-log/kokoro.md

Side-by-side table (one process, one 2-thread session shared by every variant, engine loaded and
G2P warm): for the medium and long en/zh/ja texts of bench/kokoro_rtf.py, ``engine.synthesize``
with one model run at a time (the product with the fused runner: ``KokoroEngine.load``),
and with two in flight under three policies: from the first call on; from the second call on; from
the second call on but only while the audio already handed out covers twice the next chunk's
expected time (``engine.DEFAULT_OVERLAP``, the product with the plain onnxruntime session).
The repetitions are interleaved (the variant order rotates each round), so a busy machine slows
all variants alike; medians are reported. Per run: wall time, RTF, process CPU per audio second,
time to the first chunk, and the *stall*: the total time a player that starts with the first chunk
and plays every chunk with the engine's pauses would wait for audio that is not ready yet. The
pipelining gain needs a free second core: on a machine shared with other work it shrinks to nothing.

Memory table: one fresh process per case (VmHWM), the engine loaded as the app loads it, then one
case: a 510-phoneme call alone (the model's limit, as before), two calls at once whose phonemes
together fit the look-ahead budget (the most one job can now overlap), two 510-phoneme calls at
once (what two jobs could already do before this change; the budget never holds back a job's next
call), and the long English text through the pipelined engine.

Two-jobs table: the en and zh long texts started together on one engine, with one run at once in
all (the product with the fused runner), one call per job but two runs at once in all (an infinite
guard never lets a look-ahead start), and two runs at once with the guarded look-ahead (the plain
session's product): wall time until both are done, and the worse first chunk and stall of the two.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (LOG_DIR, add_write_option, load_average, measured_header, peak_rss_mb,  # noqa: E402
                          record_round)
from bench.kokoro_rtf import TEXTS, VOICE, _run_worker, long_sentence_ids, rss_mb  # noqa: E402
from bench.machine_speed import speed_line  # noqa: E402
from cosyedge.audio import SENTENCE_PAUSE_S  # noqa: E402
from cosyedge.config import from_env  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro.engine import DEFAULT_OVERLAP, KokoroEngine  # noqa: E402
from cosyedge.engines.kokoro.pipeline import Overlap  # noqa: E402

MODEL_DIR = ROOT / "models" / "kokoro-int8"
SIZES = ("medium", "long")
#: (row name, runs at once, first-call policy)
VARIANTS = (
    ("one call at a time (product with the fused runner)", 1, Overlap()),
    ("two in flight, first call overlapped", 2, Overlap(first=True)),
    ("two in flight after the first call", 2, Overlap(first=False)),
    ("two in flight after the first call, guarded (product with the plain session)", 2, DEFAULT_OVERLAP),
)
SECTION_KEYS = ("pipeline", "jobs", "memory")
#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTION = "Two sentences in flight (`bench/kokoro_pipeline.py`)"
CURRENT_ROWS = {"pipeline": "'Embedded engine: Kokoro-82M int8' table: 'one call at a time vs two in flight'",
                "jobs": "'Embedded engine: Kokoro-82M int8' table: 'two jobs at once'",
                "memory": "'Embedded engine: Kokoro-82M int8' table: 'peak RSS: one 510-phoneme call / two such "
                          "calls of two jobs'"}
#: case name -> phonemes of the calls run at once (None: the long English text through synthesize)
MEMORY_CASES = {
    "one 510-phoneme call": (510,),
    "two calls at once, 255 + 255 phonemes": (255, 255),
    "two calls at once, 400 + 110 phonemes": (400, 110),
    "two calls at once, 510 + 510 phonemes": (510, 510),
    "long en text through the engine as loaded": None,
}


def stall_s(ready: list[float], audio: list[float], pauses: list[float]) -> float:
    """Total wait of a player that starts at the first chunk and plays chunks and pauses in order."""
    clock = ready[0]
    waited = 0.0
    for k in range(len(ready)):
        if ready[k] > clock:
            waited += ready[k] - clock
            clock = ready[k]
        clock += audio[k] + (pauses[k] if k + 1 < len(ready) else 0.0)
    return waited


def one_run(engine: KokoroEngine, text: str, lang: str) -> dict:
    sr = engine.capabilities.sample_rate
    ready, audio, pauses = [], [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for chunk in engine.synthesize(text, VOICE, SynthesisOptions(language=lang)):
        ready.append(time.perf_counter() - t0)
        audio.append(chunk.audio.size / sr)
        pauses.append(SENTENCE_PAUSE_S if chunk.pause_after_s is None else chunk.pause_after_s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    total_audio = sum(audio) + sum(pauses[:-1])
    return {"wall": wall, "cpu": cpu, "audio": total_audio, "first": ready[0], "chunks": len(ready),
            "stall": stall_s(ready, audio, pauses)}


def side_by_side(threads: int, reps: int, texts: list[tuple[str, str]]) -> dict:
    base = KokoroEngine.load(MODEL_DIR, from_env(onnx_threads=threads))
    engines = {name: dataclasses.replace(base, parallel_runs=runs, overlap=overlap)
               for name, runs, overlap in VARIANTS}
    for lang, sizes in TEXTS.items():  # onnxruntime's first-run allocations, G2P dictionaries
        list(base.synthesize(sizes["short"], VOICE, SynthesisOptions(language=lang)))
    names = list(engines)
    runs: dict[tuple[str, str, str], list[dict]] = {}
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for lang, size in texts:
            for name in order:
                runs.setdefault((lang, size, name), []).append(one_run(engines[name], TEXTS[lang][size], lang))
    rows = []
    for (lang, size, name), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "first", "stall")}
        rows.append({"lang": lang, "size": size, "variant": name, "chunks": rs[0]["chunks"],
                     "audio": rs[0]["audio"], **med, "best": min(r["wall"] for r in rs),
                     "peak_runs": engines[name].runs.peak})
    base.close()
    return {"threads": threads, "reps": reps, "rows": rows}


def side_by_side_table(res: dict) -> str:
    intro = (f"{res['threads']} intra-op threads, one session shared by all variants, voice `{VOICE}`, "
             f"{res['reps']} interleaved repetitions (median; best wall in brackets). RTF = wall / audio "
             "(audio includes the pauses the joiner puts between chunks); CPU/audio = process CPU s per "
             "audio s; speed-up = the first row's median wall / the row's; first chunk = the call to the "
             "first chunk; stall = total wait of a real-time player that starts at the first chunk.")
    lines = [intro, "", "| lang | text | chunks | audio s | variant | wall s | RTF | speed-up | CPU / audio "
             "| first chunk ms | stall ms | most runs at once |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {(r["lang"], r["size"]): r["wall"] for r in res["rows"] if r["variant"] == VARIANTS[0][0]}
    for r in res["rows"]:
        lines.append(f"| {r['lang']} | {r['size']} | {r['chunks']} | {r['audio']:.1f} | {r['variant']} "
                     f"| {r['wall']:.2f} ({r['best']:.2f}) | {r['wall'] / r['audio']:.3f} "
                     f"| {base[(r['lang'], r['size'])] / r['wall']:.2f}x | {r['cpu'] / r['audio']:.3f} "
                     f"| {r['first'] * 1000:.0f} | {r['stall'] * 1000:.0f} | {r['peak_runs']} |")
    totals = {}
    for r in res["rows"]:
        t = totals.setdefault(r["variant"], [0.0, 0.0])
        t[0] += r["wall"]
        t[1] += r["audio"]
    lines += ["", "| variant | all texts above: wall s / audio s = RTF |", "|---|---|"]
    for name, (wall, audio) in totals.items():
        lines.append(f"| {name} | {wall:.2f} / {audio:.1f} = {wall / audio:.3f} |")
    return "\n".join(lines)


def two_jobs(threads: int, reps: int) -> dict:
    """Two jobs at once on one engine (en and zh long texts): runs at once and calls per job."""
    base = KokoroEngine.load(MODEL_DIR, from_env(onnx_threads=threads))
    for lang, sizes in TEXTS.items():
        list(base.synthesize(sizes["short"], VOICE, SynthesisOptions(language=lang)))
    variants = {"one run at once in all (product with the fused runner)":
                dataclasses.replace(base, parallel_runs=1),
                "one call per job, two runs at once in all (round 2)":
                dataclasses.replace(base, parallel_runs=2, overlap=Overlap(first=False, guard=float("inf"))),
                "two runs at once, look-ahead guarded (product with the plain session)":
                dataclasses.replace(base, parallel_runs=2, overlap=DEFAULT_OVERLAP)}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for rep in range(reps):
        for name in (list(variants) if rep % 2 == 0 else list(variants)[::-1]):
            engine = variants[name]
            results: dict[str, dict] = {}
            start = time.perf_counter()
            workers = [threading.Thread(target=lambda lang=lang: results.__setitem__(
                lang, one_run(engine, TEXTS[lang]["long"], lang))) for lang in ("en", "zh")]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            wall = time.perf_counter() - start
            audio = sum(r["audio"] for r in results.values())
            runs[name].append({"wall": wall, "audio": audio, "first": max(r["first"] for r in results.values()),
                               "stall": max(r["stall"] for r in results.values())})
    rows = [{"variant": name, "peak_runs": variants[name].runs.peak, "audio": rs[0]["audio"],
             **{k: statistics.median(r[k] for r in rs) for k in ("wall", "first", "stall")}}
            for name, rs in runs.items()]
    base.close()
    return {"threads": threads, "reps": reps, "rows": rows}


def two_jobs_table(res: dict) -> str:
    lines = [f"Two jobs started together on one engine ({res['threads']} threads): the en and zh long texts, "
             f"{res['reps']} interleaved repetitions (median). Wall = until both are done; first chunk and "
             "stall = the worse of the two jobs.", "",
             "| variant | most runs at once | audio s | wall s | RTF (both) | first chunk ms | stall ms |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['variant']} | {r['peak_runs']} | {r['audio']:.1f} | {r['wall']:.2f} "
                     f"| {r['wall'] / r['audio']:.3f} | {r['first'] * 1000:.0f} | {r['stall'] * 1000:.0f} |")
    return "\n".join(lines)


def memory_worker(case: str, threads: int) -> dict:
    engine = KokoroEngine.load(MODEL_DIR, from_env(onnx_threads=threads))
    pack = engine.style_pack(VOICE)
    engine.infer(engine.frontend.token_ids(engine.frontend.sentences("Hi.", "en")[0].phonemes), pack, 1.0)
    after_load = rss_mb()
    ids = long_sentence_ids(engine)
    t0 = time.perf_counter()
    sizes = MEMORY_CASES[case]
    if sizes is None:
        for _ in engine.synthesize(TEXTS["en"]["long"], VOICE, SynthesisOptions(language="en")):
            pass
    else:  # the calls at once that two jobs could make on the plain session (the fused runner's engine runs one)
        engine = dataclasses.replace(engine, parallel_runs=len(sizes))
        workers = [threading.Thread(target=engine.infer, args=(ids[:n], pack, 1.0)) for n in sizes]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    return {"case": case, "after_load_mb": after_load, "peak_mb": peak_rss_mb(), "after_mb": rss_mb(),
            "seconds": time.perf_counter() - t0, "peak_runs": engine.runs.peak}


def memory_table(rows: list[dict], threads: int) -> str:
    lines = [f"One fresh process per case, {threads} threads, engine loaded and one short call made; "
             "peak = VmHWM of the process.", "",
             "| case | most runs at once | RSS after load MB | peak RSS MB | RSS after MB | wall s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['peak_runs']} | {r['after_load_mb']:.0f} | {r['peak_mb']:.0f} "
                     f"| {r['after_mb']:.0f} | {r['seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions per text and variant")
    parser.add_argument("--only", choices=SECTION_KEYS, help="run one table only")
    parser.add_argument("--texts", nargs="+", default=[f"{lang}:{size}" for lang in TEXTS for size in SIZES],
                        help="LANG:SIZE texts of bench/kokoro_rtf.py for the side-by-side table")
    add_write_option(parser, LAB_LOG)
    parser.add_argument("--worker", choices=list(MEMORY_CASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from cosyedge.host.heap import return_large_blocks

    return_large_blocks()  # as the server does (Service.start): the product's memory behaviour
    if args.worker:
        print(json.dumps(memory_worker(args.worker, args.threads)))
        return 0
    command = "python bench/kokoro_pipeline.py " + " ".join(argv if argv is not None else sys.argv[1:])
    blocks = {}
    for key in SECTION_KEYS:
        if args.only not in (None, key):
            continue
        started, before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
        if key == "pipeline":
            texts = [tuple(t.split(":", 1)) for t in args.texts]
            body = side_by_side_table(side_by_side(args.threads, args.reps, texts))
        elif key == "jobs":
            body = two_jobs_table(two_jobs(args.threads, args.reps))
        else:
            rows = [json.loads(_run_worker(["--worker", case, "--threads", str(args.threads)], script=__file__))
                    for case in MEMORY_CASES]
            body = memory_table(rows, args.threads)
        blocks[key] = (started, f"{measured_header(started, command, before, speed_before)}\n\n{body}")
        print(blocks[key][1] + "\n", flush=True)
    if args.write:
        for key, (started, text) in blocks.items():
            record_round(args.write, SECTION, key, started, text, CURRENT_ROWS[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
