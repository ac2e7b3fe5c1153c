"""Why the Kokoro engine's RTF is worse than the model's alone (issue 2): where each call's time goes.

    .venv/bin/python bench/kokoro_gap.py                          # all tables, printed as markdown
    .venv/bin/python bench/kokoro_gap.py --only calls --write     # recorded in docs/bench-log/kokoro.md

Four tables, each answering one hypothesis:

* ``calls``: every model call of the bench texts (bench/kokoro_rtf.py), engine loaded as the app
  loads it. Per call: the audio the model renders (``engine.infer``) and what is left after
  ``trim_silence`` (what the engine yields and what the engine RTF divides by), the silence cut at
  each end, wall and process CPU time of the first call of that input and of an immediate repeat,
  and the minor page faults of each (onnxruntime's arena growing into fresh pages). Also the time
  ``synthesize`` spends before the model call (whole-text frontend, style lookup).
* ``options``: onnxruntime / glibc memory settings, each a change from the product's session (which
  has no memory pattern since this bench found that one grew the arena); one fresh process per
  setting, interleaved rounds, 1 intra-op thread (CPU time is the comparison on a shared machine): a
  first pass over the call inputs (every size new) and a repeat pass; CPU, system CPU, minor faults,
  VmHWM, output hash.
* ``edges``: the model's edge silence is rendered work; this caps the leading pad token's duration in
  a probe copy of the runtime graph (written to a temporary directory, never used by the product) and
  measures what it saves and how much it moves the *speech* (log-mel over the loud frames, aligned
  by the exact frame shift) against the noise floor of a 1e-6 style change.
* ``steps``: where a call's wall time goes inside the fused runner, per model call of the bench texts
  (median of ``--reps`` rounds over all calls after a warm-up round): segment 0 (text side, prosody, decoder blocks),
  the generator's onnxruntime segments, the chain kernels, the other fused steps; and the vocoder
  convolutions' int8 GEMM work (counted from the chains' im2col shapes) with the time it needs at
  the rate the int8 GEMM probe (bench/machine_speed.py) reaches in the same run. That time is a
  floor for the call: the rest of the table is what is spent above it.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import hashlib
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import LOG_DIR, add_write_option, load_average, measured_header, record_round  # noqa: E402
from bench.kokoro_rtf import TEXTS, VOICE, log_mel_db  # noqa: E402
from bench.machine_speed import gemm_rate, speed_line  # noqa: E402
from cosyedge.config import from_env  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro import model_files  # noqa: E402
from cosyedge.engines.kokoro.engine import KokoroEngine  # noqa: E402
from cosyedge.engines.kokoro.sessions import make_session  # noqa: E402
from cosyedge.engines.kokoro.silence import SILENCE_THRESHOLD, trim_silence  # noqa: E402

SECTION_KEYS = ("calls", "options", "edges", "steps")
#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTION = "Engine vs model alone: where the gap goes (`bench/kokoro_gap.py`)"
CURRENT_ROWS = {"calls": "none (history: rendered vs spoken audio per call)",
                "options": "none (history: session and heap options)",
                "edges": "none (history: capping the edge silence)",
                "steps": "'Embedded engine: Kokoro-82M int8' table: 'where the time goes: calls against "
                         "their int8 GEMM floor'"}
MODEL_DIR = ROOT / "models" / model_files.MODEL_ID
SR = model_files.SAMPLE_RATE
FRAME = 600  # samples per duration frame (24 kHz, 40 frames per second)
OPTIONS = ("product", "mem_pattern_on", "arena_same_as_requested", "mallopt_keep_heap")


def _cpu() -> tuple[float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime, r.ru_minflt


def _load_engine(threads: int) -> KokoroEngine:
    engine = KokoroEngine.load(MODEL_DIR, from_env(onnx_threads=threads))
    for lang, sizes in TEXTS.items():  # G2P dictionaries load on first use
        for text in sizes.values():
            engine.frontend.sentences(text, lang)
    return engine


def call_inputs(engine: KokoroEngine) -> list[tuple[str, str, list[int]]]:
    """(lang, size, ids) of every model call the engine makes for the bench texts."""
    return [(lang, size, engine.frontend.token_ids(s.phonemes))
            for lang, sizes in TEXTS.items() for size, text in sizes.items()
            for s in engine.frontend.sentences(text, lang)]


# --- calls ------------------------------------------------------------------------------------------

def _timed_infer(engine: KokoroEngine, ids: list[int], pack: np.ndarray) -> tuple[np.ndarray, dict]:
    c0, _, f0 = _cpu()
    t0 = time.perf_counter()
    audio = engine.infer(ids, pack, 1.0)
    wall = time.perf_counter() - t0
    c1, _, f1 = _cpu()
    return audio, {"wall": wall, "cpu": c1 - c0, "faults": f1 - f0}


def calls_rows(threads: int) -> dict:
    engine = _load_engine(threads)
    pack = engine.style_pack(VOICE)
    engine.infer([50, 51, 52], pack, 1.0)  # the first run allocates onnxruntime's buffers
    rows = []
    for lang, size, ids in call_inputs(engine):
        audio, first = _timed_infer(engine, ids, pack)
        again, repeat = _timed_infer(engine, ids, pack)
        loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
        rows.append({"lang": lang, "size": size, "phonemes": len(ids), "raw": audio.size / SR,
                     "trimmed": trim_silence(audio, SR).size / SR, "lead": loud[0] / SR,
                     "trail": (audio.size - 1 - loud[-1]) / SR, "first": first, "repeat": repeat,
                     "same": bool(np.array_equal(audio, again))})
    pre = _before_model(engine)
    engine.close()
    return {"threads": threads, "rows": rows, "pre": pre}


def _before_model(engine: KokoroEngine) -> dict[tuple[str, str], float]:
    """Median ms from ``synthesize`` to the start of its first model call, per text (3 runs)."""
    session = engine.session
    stamps: list[float] = []

    class Stamp:
        def run(self, names, feeds):  # the Session protocol
            stamps.append(time.perf_counter())
            return session.run(names, feeds)

    engine.session = Stamp()
    out = {}
    try:
        for lang, sizes in TEXTS.items():
            for size, text in sizes.items():
                waits = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    chunks = engine.synthesize(text, VOICE, SynthesisOptions(language=lang))
                    next(chunks)
                    chunks.close()
                    waits.append(stamps[-1] - t0)
                out[(lang, size)] = statistics.median(waits) * 1000
    finally:
        engine.session = session
    return out


def calls_table(res: dict) -> str:
    lines = [f"{res['threads']} intra-op threads, voice `{VOICE}`, speed 1.0; every model call of the bench texts "
             "in text order. model audio = what `engine.infer` returns; spoken = after `trim_silence` (what "
             "`synthesize` yields; the engine table's RTF divides by this); lead/tail = silence cut at each end; "
             "first = the first call with this input, repeat = the same input again at once (arena already "
             "grown); faults = minor page faults during the call; RTF = first-call wall / audio.", "",
             "| lang | text | phonemes | model audio s | spoken s | lead s | tail s | first ms | first CPU ms "
             "| first faults | repeat ms | repeat CPU ms | repeat faults | RTF (model audio) | RTF (spoken) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        f, p = r["first"], r["repeat"]
        lines.append(f"| {r['lang']} | {r['size']} | {r['phonemes']} | {r['raw']:.2f} | {r['trimmed']:.2f} "
                     f"| {r['lead']:.2f} | {r['trail']:.2f} | {f['wall'] * 1000:.0f} | {f['cpu'] * 1000:.0f} "
                     f"| {f['faults']} | {p['wall'] * 1000:.0f} | {p['cpu'] * 1000:.0f} | {p['faults']} "
                     f"| {f['wall'] / r['raw']:.3f} | {f['wall'] / r['trimmed']:.3f} |")
    rows = res["rows"]
    raw, spoken = sum(r["raw"] for r in rows), sum(r["trimmed"] for r in rows)
    first = {k: sum(r["first"][k] for r in rows) for k in ("wall", "cpu", "faults")}
    again = {k: sum(r["repeat"][k] for r in rows) for k in ("wall", "cpu", "faults")}
    lines.append(f"| all | {len(rows)} calls | {sum(r['phonemes'] for r in rows)} | {raw:.1f} | {spoken:.1f} "
                 f"| {sum(r['lead'] for r in rows):.1f} | {sum(r['trail'] for r in rows):.1f} "
                 f"| {first['wall'] * 1000:.0f} | {first['cpu'] * 1000:.0f} | {first['faults']} "
                 f"| {again['wall'] * 1000:.0f} | {again['cpu'] * 1000:.0f} | {again['faults']} "
                 f"| {first['wall'] / raw:.3f} | {first['wall'] / spoken:.3f} |")
    identical = all(r["same"] for r in rows)
    lines += ["", f"Repeat output bit-identical to the first call's: {'yes' if identical else 'NO'}. "
              "Time from `synthesize` to the start of its first model call (whole-text frontend, style "
              "lookup; median of 3, ms): "
              + ", ".join(f"{lang} {size} {ms:.1f}" for (lang, size), ms in res["pre"].items()) + "."]
    return "\n".join(lines)


# --- options ----------------------------------------------------------------------------------------

def _option_session(option: str):
    """The runtime graph's session with one memory setting changed from the product's."""
    import onnxruntime as ort

    graph = MODEL_DIR / json.loads((MODEL_DIR / "manifest.json").read_text())["runtime_graph"]["file"]
    if option == "mallopt_keep_heap":  # glibc: no mmap below 32 MB, never give the heap top back
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        if not (libc.mallopt(m_mmap_threshold, 32 * 2**20) and libc.mallopt(m_trim_threshold, 2**30)):
            raise SystemExit("mallopt failed")
    session = make_session(graph, 1, "disable")
    if option in ("product", "mallopt_keep_heap"):
        return session
    opts = session.get_session_options()
    del session
    if option == "mem_pattern_on":  # onnxruntime's default; the product's setting until 2026-11-30
        opts.enable_mem_pattern = True
    elif option == "arena_same_as_requested":
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": 1}))
        opts.add_session_config_entry("session.use_env_allocators", "1")
    return ort.InferenceSession(str(graph), sess_options=opts, providers=["CPUExecutionProvider"])


def options_worker(option: str, inputs: Path) -> dict:
    data = json.loads(inputs.read_text())
    pack = np.asarray(data["pack"], dtype=np.float32)
    session = _option_session(option)

    def feeds(ids: list[int]) -> dict:
        return {"tokens": np.array([[0, *ids, 0]], np.int64), "style": pack[len(ids) - 1].reshape(1, 256),
                "speed": np.array([1.0], np.float32)}

    session.run(None, feeds([50, 51, 52]))
    out: dict = {"option": option}
    digest = hashlib.sha256()
    for name in ("first", "repeat"):
        c0, s0, f0 = _cpu()
        for ids in data["ids"]:
            audio = session.run(None, feeds(ids))[0]
            if name == "first":
                digest.update(audio.tobytes())
        c1, s1, f1 = _cpu()
        out[name] = {"cpu": c1 - c0, "sys": s1 - s0, "faults": f1 - f0}
    out["hash"] = digest.hexdigest()[:12]
    status = Path("/proc/self/status").read_text()
    out["hwm_mb"] = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024
    return out


def options_rows(rounds: int) -> dict:
    engine = _load_engine(1)
    inputs = call_inputs(engine)[::2]  # every other call: ~35 s of model audio per pass
    pack = engine.style_pack(VOICE)
    engine.close()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inputs.json"
        path.write_text(json.dumps({"ids": [ids for _, _, ids in inputs], "pack": pack.tolist()}))
        runs: dict[str, list[dict]] = {}
        for _ in range(rounds):
            for option in OPTIONS:
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", option,
                                      "--inputs", str(path)], capture_output=True, text=True, cwd=ROOT, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"worker {option} failed:\n{out.stderr[-3000:]}")
                runs.setdefault(option, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"calls": len(inputs), "phonemes": sum(len(ids) for _, _, ids in inputs), "rounds": rounds, "runs": runs}


def options_table(res: dict) -> str:
    lines = [f"1 intra-op thread; one fresh process per setting, {res['rounds']} interleaved rounds (median); "
             f"{res['calls']} calls ({res['phonemes']} phonemes) per pass; first pass = every input size new to "
             "the session, repeat = the same inputs again; hash = sha256 of the first pass's audio.", "",
             "| setting | first pass CPU s | (system s) | faults | repeat CPU s | (system s) | faults | VmHWM MB "
             "| audio hash |", "|---|---|---|---|---|---|---|---|---|"]

    def med(runs: list[dict], name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in runs)

    for option, runs in res["runs"].items():
        lines.append(f"| {option} | {med(runs, 'first', 'cpu'):.2f} | {med(runs, 'first', 'sys'):.2f} "
                     f"| {med(runs, 'first', 'faults'):.0f} | {med(runs, 'repeat', 'cpu'):.2f} "
                     f"| {med(runs, 'repeat', 'sys'):.2f} | {med(runs, 'repeat', 'faults'):.0f} "
                     f"| {statistics.median(r['hwm_mb'] for r in runs):.0f} | {runs[0]['hash']} |")
    return "\n".join(lines)


# --- edges ------------------------------------------------------------------------------------------

def _capped_graph(source: Path, target: Path) -> None:
    """Copy of ``source`` whose token durations pass through Min(durations, cap) (cap: a new input)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(source))
    nodes = list(model.graph.node)
    at = next(i for i, n in enumerate(nodes) if n.name == "/encoder/Cast" and n.input[0] == "/encoder/Clip_output_0")
    nodes[at].input[0] = "durations_capped"
    nodes.insert(at, helper.make_node("Min", ["/encoder/Clip_output_0", "duration_cap"], ["durations_capped"],
                                      name="bench_duration_cap"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.input.append(helper.make_tensor_value_info("duration_cap", TensorProto.FLOAT, None))
    model.graph.output.append(helper.make_tensor_value_info("/encoder/Round_output_0", TensorProto.FLOAT, None))
    onnx.save(model, str(target))


def _speech_distance(reference: np.ndarray, audio: np.ndarray, shift: int) -> float:
    """Mean |log-mel difference| (dB) over the loud frames, ``audio`` compared with ``reference[shift:]``."""
    ref = reference[shift:]
    n = min(ref.size, audio.size)
    a, b = log_mel_db(ref[:n]), log_mel_db(audio[:n])
    loud = a.max(axis=0) > a.max() - 50
    return float(np.mean(np.abs(a - b)[:, loud]))


def edges_rows(caps: list[int]) -> dict:
    import onnxruntime as ort

    engine = _load_engine(1)
    inputs = [(lang, size, engine.frontend.token_ids(engine.frontend.sentences(TEXTS[lang][size], lang)[0].phonemes))
              for lang in TEXTS for size in ("short", "medium")]
    pack = engine.style_pack(VOICE)
    graph = MODEL_DIR / json.loads((MODEL_DIR / "manifest.json").read_text())["runtime_graph"]["file"]
    engine.close()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "capped.onnx"
        _capped_graph(graph, probe)
        opts = make_session(graph, 1, "disable").get_session_options()
        session = ort.InferenceSession(str(probe), sess_options=opts, providers=["CPUExecutionProvider"])

        def run(ids: list[int], lead: float, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, float]:
            cap = np.full((1, len(ids) + 2), 1e9, np.float32)
            cap[0, 0] = lead
            feeds = {"tokens": np.array([[0, *ids, 0]], np.int64),
                     "style": pack[len(ids) - 1].reshape(1, 256) * np.float32(scale),
                     "speed": np.array([1.0], np.float32), "duration_cap": cap}
            c0 = time.process_time()
            audio, durations = session.run(None, feeds)
            return audio.reshape(-1), durations.reshape(-1), time.process_time() - c0

        for lang, size, ids in inputs:
            reference, durations, cpu = run(ids, 1e9)
            floor, _, _ = run(ids, 1e9, 1 + 1e-6)
            row = {"lang": lang, "size": size, "phonemes": len(ids), "lead_frames": int(durations[0]),
                   "raw": reference.size / SR, "cpu": cpu, "floor": _speech_distance(reference, floor, 0), "caps": {}}
            for k in caps:
                audio, _, c = run(ids, float(k))
                shift = max(0, int(durations[0]) - k) * FRAME
                row["caps"][k] = {"raw": audio.size / SR, "cpu": c, "db": _speech_distance(reference, audio, shift)}
            rows.append(row)
    return {"caps": caps, "rows": rows}


def edges_table(res: dict) -> str:
    caps = res["caps"]
    lines = ["1 intra-op thread; probe copy of the runtime graph with the leading pad token's duration capped at "
             "k frames (25 ms each; the model gives it 12-13). dB = mean |log-mel difference| over the loud "
             "frames against the uncapped audio shifted by the removed frames; floor = the same measure for a "
             "1e-6 relative change of the style vector (no cap). CPU = one call, process CPU time.", "",
             "| lang | text | phonemes | lead frames | model audio s | CPU ms | floor dB | "
             + " | ".join(f"cap {k}: audio s / CPU ms / dB" for k in caps) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(caps)]
    for r in res["rows"]:
        cells = " | ".join(f"{r['caps'][k]['raw']:.2f} / {r['caps'][k]['cpu'] * 1000:.0f} / {r['caps'][k]['db']:.1f}"
                          for k in caps)
        lines.append(f"| {r['lang']} | {r['size']} | {r['phonemes']} | {r['lead_frames']} | {r['raw']:.2f} "
                     f"| {r['cpu'] * 1000:.0f} | {r['floor']:.1f} | {cells} |")
    return "\n".join(lines)


# --- steps ------------------------------------------------------------------------------------------

STEP_KINDS = ("segment 0", "generator segments", "chain kernels", "fused steps")


def _step_kind(index: int, step: object) -> str:
    """Which column of the steps table a fused-runner step's time goes to."""
    name = type(step).__name__
    if name == "_Segment":
        return "segment 0" if index == 0 else "generator segments"
    return "chain kernels" if name == "_Kernel" else "fused steps"


def steps_rows(threads: int, reps: int) -> dict:
    """Per model call: median wall seconds of each step kind and of the whole call, and the conv GEMM MACs."""
    engine = _load_engine(threads)
    session = engine.session
    if not hasattr(session, "steps"):
        raise SystemExit("the engine did not load the fused runner (see the load log); the steps table needs it")
    spent: dict[str, float] = dict.fromkeys(STEP_KINDS, 0.0)
    macs = [0]

    def timed(run, kind: str, chain_input: str | None):
        def wrapper(tensors, state):
            start = time.perf_counter()
            out = run(tensors, state)
            spent[kind] += time.perf_counter() - start
            if chain_input:  # rows x depth x columns of the GEMM reading this im2col (square resblock convs)
                col = next(v for v in out.values() if v.ndim == 3)
                macs[0] += tensors[chain_input].shape[1] * col.shape[1] * col.shape[2]
            return out
        return wrapper

    for i, step in enumerate(session.steps):
        kind = _step_kind(i, step)
        step.run = timed(step.run, kind, step.chain.x if kind == "chain kernels" else None)
    pack = engine.style_pack(VOICE)
    calls = call_inputs(engine)
    rate_before = gemm_rate(threads)
    for _, _, ids in calls:  # warm-up: buffers of every size
        engine.infer(ids, pack, 1.0)
    samples: list[list[dict]] = [[] for _ in calls]
    spoken = [0.0] * len(calls)
    for _ in range(reps):  # rounds over all calls, so a drift of the machine's speed hits every call alike
        for i, (_, _, ids) in enumerate(calls):
            for kind in spent:
                spent[kind] = 0.0
            macs[0] = 0
            start = time.perf_counter()
            audio = engine.infer(ids, pack, 1.0)
            samples[i].append({"wall": time.perf_counter() - start, **spent, "macs": macs[0]})
            spoken[i] = trim_silence(audio, SR).size / SR
    engine.close()
    rows = [{"lang": lang, "size": size, "phonemes": len(ids), "spoken": spoken[i], "macs": samples[i][-1]["macs"],
             **{key: statistics.median(s[key] for s in samples[i]) for key in ("wall", *STEP_KINDS)}}
            for i, (lang, size, ids) in enumerate(calls)]
    # the floor takes the faster of two probes (before and after the rounds): a lower bound on the time
    return {"threads": threads, "reps": reps, "rows": rows, "rate": max(rate_before, gemm_rate(threads)) * 1e9}


def steps_table(res: dict) -> str:
    rate = res["rate"]
    lines = [f"{res['threads']} intra-op threads, voice `{VOICE}`, speed 1.0, fused runner with the generator input "
             f"crop; every model call of the bench texts, median of {res['reps']} rounds over all calls after a "
             "warm-up round (ms). rest = the call's wall time outside the runner's steps (feeds, crop "
             "bookkeeping, trim). GEMM GMAC = the vocoder "
             "convolutions' int8 work (chain channels x im2col rows x columns: the resblock convolutions keep "
             "their width; the two small noise convolutions are left out); GEMM floor = that work at the "
             f"int8 GEMM probe's rate (bench/machine_speed.py's shape; the faster of a probe before and one after "
             f"the rounds: {rate / 1e9:.0f} GMAC/s). "
             "RTF divides by the spoken audio (after `trim_silence`), as the engine table does.", "",
             "| lang | text | phonemes | spoken s | wall | RTF | segment 0 | generator segments | chain kernels "
             "| fused steps | rest | GEMM GMAC | GEMM floor | RTF of the floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        steps = sum(r[k] for k in STEP_KINDS)
        floor = r["macs"] / rate
        lines.append(f"| {r['lang']} | {r['size']} | {r['phonemes']} | {r['spoken']:.2f} | {r['wall'] * 1000:.0f} "
                     f"| {r['wall'] / r['spoken']:.3f} | "
                     + " | ".join(f"{r[k] * 1000:.0f}" for k in STEP_KINDS)
                     + f" | {max(0.0, r['wall'] - steps) * 1000:.0f} | {r['macs'] / 1e9:.1f} | {floor * 1000:.0f} "
                     f"| {floor / r['spoken']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for the calls table")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the options table")
    parser.add_argument("--caps", type=int, nargs="+", default=[10, 8, 4], help="lead caps (frames) to try")
    parser.add_argument("--reps", type=int, default=5, help="rounds over all calls in the steps table")
    parser.add_argument("--only", choices=SECTION_KEYS, nargs="+", help="run these tables only")
    add_write_option(parser, LAB_LOG)
    parser.add_argument("--worker", choices=OPTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(options_worker(args.worker, Path(args.inputs))))
        return 0
    command = "python bench/kokoro_gap.py " + " ".join(argv if argv is not None else sys.argv[1:])
    blocks = {}
    for key in SECTION_KEYS:
        if args.only and key not in args.only:
            continue
        started, before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
        if key == "calls":
            body = calls_table(calls_rows(args.threads))
        elif key == "options":
            body = options_table(options_rows(args.rounds))
        elif key == "steps":
            body = steps_table(steps_rows(args.threads, args.reps))
        else:
            body = edges_table(edges_rows(args.caps))
        blocks[key] = (started, f"{measured_header(started, command, before, speed_before)}\n\n{body}")
        print(blocks[key][1] + "\n", flush=True)
    if args.write:
        for key, (started, text) in blocks.items():
            record_round(args.write, SECTION, key, started, text, CURRENT_ROWS[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
