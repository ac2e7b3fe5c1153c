"""What each setup-time graph rewrite of the Kokoro int8 model buys (issue 2's speed levers).

Run from the repository root with the project's venv (after `python -m cosyedge setup-model`):

    .venv/bin/python bench/kokoro_levers.py                      # prints a markdown table (~2-4 min)
    .venv/bin/python bench/kokoro_levers.py --reps 5 --write      # recorded in docs/bench-log/kokoro.md
    .venv/bin/python bench/kokoro_levers.py --previous OLD.onnx  # add a row for an older runtime graph
    .venv/bin/python bench/kokoro_levers.py --fused-only         # shipped, runtime graph, fused runner

Each row is the shipped graph with a growing list of ``optimize`` passes; the last row runs the full
runtime graph through the fused chain runner (``fused_runtime``). All graphs are loaded in
ONE process (1 and 2 intra-op threads each, graph optimizations off, idle threads sleeping, as the
engine loads them) and run interleaved on the same input, so a busy machine slows all of them
alike. The figure to compare on a shared machine is the single-thread process CPU time; the
2-thread ratio (1-thread wall / 2-thread wall) only means something when the second core is free.
Output is compared with the shipped graph: bit-identical, or the band-energy distance that
``setup-model`` checks (``checks.spectral_distance_db``) and the log-mel distance used elsewhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosyedge.engines.kokoro import model_files  # noqa: E402
from cosyedge.export.kokoro import assembly, checks, optimize  # noqa: E402
from bench.common import LOG_DIR, add_write_option, load_average, measured_header, record_round  # noqa: E402
from bench.kokoro_rtf import VARIANT_TEXT, compare, variant_feeds  # noqa: E402
from bench.machine_speed import speed_line  # noqa: E402

#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTIONS = {"levers": "Round 2: the graph levers one at a time (`bench/kokoro_levers.py`)",
            "levers-fused": "Round 3: the fused conv-input chains (`fused_runtime`, `kernels`; branch kfuse)"}
CURRENT_ROWS = {"levers": "none (history: each graph rewrite on its own)",
                "levers-fused": "'Embedded engine: Kokoro-82M int8' table: 'model alone, levers input' and "
                                "'model alone against the shipped int8 graph'"}
LEVERS: list[tuple[str, tuple[str, ...] | None]] = [
    ("shipped int8 graph", None),
    ("conv_as_matmul (channel-first im2col, no transposes)", ("conv_as_matmul",)),
    ("+ square (Pow(x, 2) -> Mul)", assembly.EXACT_PASSES),
    ("+ float_tail (MatMulIntegerToFloat)", assembly.EXACT_PASSES + ("float_tail",)),
    ("+ instance_norm (AdaIN in one kernel)", assembly.EXACT_PASSES + ("instance_norm",)),
    ("all: the runtime graph", assembly.RUNTIME_PASSES),
]


FUSED_LABEL = "all + fused chain runner (numba kernels, onnxruntime segments)"
SHORT_LEVERS = ("shipped int8 graph", "all: the runtime graph")  # the rows kept by --fused-only


def lever_graphs(model_dir: Path, cache: Path, previous: Path | None,
                 fused_only: bool = False) -> list[tuple[str, Path]]:
    """Each lever's graph file, derived into ``cache`` (keyed by the passes and optimize.py's source);
    the last row runs the full runtime graph through ``fused_runtime.FusedSession``."""
    shipped = model_dir / model_files.ONNX_NAME
    code = hashlib.sha256(Path(optimize.__file__).read_bytes()).hexdigest()[:12]
    cache.mkdir(parents=True, exist_ok=True)
    graphs = []
    for label, passes in LEVERS:
        if fused_only and label not in SHORT_LEVERS:
            continue
        if passes is None:
            graphs.append((label, shipped))
            continue
        path = cache / f"levers-{'+'.join(passes)}-{code}.onnx"
        if not path.exists():
            optimize.derive(shipped, path, passes)
        graphs.append((label, path))
    if previous is not None:
        graphs.insert(1, (f"previous runtime graph ({previous.name})", previous))
    graphs.append((FUSED_LABEL, graphs[-1][1]))
    return graphs


def open_session(path: Path, threads: int, label: str = ""):
    """A session as the engine opens a runtime graph (``make_session``, optimizations off), or the
    fused runner for its row."""
    if label == FUSED_LABEL:
        from cosyedge.engines.kokoro.fused_runtime import FusedSession

        return FusedSession(path, threads)
    from cosyedge.engines.kokoro.sessions import make_session

    return make_session(path, threads, "disable")


def output_note(reference: np.ndarray, audio: np.ndarray) -> str:
    if audio.shape == reference.shape and np.array_equal(audio, reference):
        return "bit-identical"
    if audio.shape != reference.shape:
        return compare(reference, audio)
    return f"{compare(reference, audio)}; band distance {checks.spectral_distance_db(reference, audio):.2f} dB"


def run_levers(model_dir: Path, reps: int, cache: Path, previous: Path | None, fused_only: bool = False) -> dict:
    graphs = lever_graphs(model_dir, cache, previous, fused_only)
    feeds, n_phonemes = variant_feeds(model_dir)
    sessions = {(label, t): open_session(path, t, label) for label, path in graphs for t in (1, 2)}
    outputs = {label: sessions[(label, 1)].run(None, feeds)[0].reshape(-1) for label, _ in graphs}
    for (label, t), session in sessions.items():
        if t == 2:
            session.run(None, feeds)  # warm-up
    cpu1 = {label: [] for label, _ in graphs}
    wall = {(label, t): [] for label, _ in graphs for t in (1, 2)}
    for _ in range(reps):
        for label, _ in graphs:
            for t in (1, 2):
                t0, c0 = time.perf_counter(), time.process_time()
                sessions[(label, t)].run(None, feeds)
                wall[(label, t)].append(time.perf_counter() - t0)
                if t == 1:
                    cpu1[label].append(time.process_time() - c0)
    reference = outputs[graphs[0][0]]
    base = statistics.median(cpu1[graphs[0][0]])
    rows = []
    for label, path in graphs:
        cpu = statistics.median(cpu1[label])
        w1, w2 = statistics.median(wall[(label, 1)]), statistics.median(wall[(label, 2)])
        rows.append({"label": label, "file_mb": path.stat().st_size / 2**20, "cpu_s": cpu, "cpu_min_s": min(cpu1[label]),
                     "speedup": base / cpu, "wall1_s": w1, "wall2_s": w2, "ratio": w1 / w2,
                     "output": output_note(reference, outputs[label])})
    return {"rows": rows, "reps": reps, "phonemes": n_phonemes, "audio_s": reference.size / 24_000}


def levers_table(res: dict) -> str:
    lines = [f"Input: {VARIANT_TEXT[1]} {VARIANT_TEXT[0]} text, {res['phonemes']} phonemes -> {res['audio_s']:.1f} s of "
             f"audio; {res['reps']} interleaved repetitions; CPU s = process CPU time of one run at 1 intra-op "
             "thread (median; best in brackets); speed-up = shipped CPU s / row CPU s; 2-thread ratio = 1-thread "
             "wall / 2-thread wall (medians).", "",
             "| graph | file MB | CPU s, 1 thread | speed-up (CPU) | wall s, 1 thread | wall s, 2 threads "
             "| 2-thread ratio | output vs shipped |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['label']} | {r['file_mb']:.0f} | {r['cpu_s']:.2f} ({r['cpu_min_s']:.2f}) | {r['speedup']:.2f}x "
                     f"| {r['wall1_s']:.2f} | {r['wall2_s']:.2f} | {r['ratio']:.2f} | {r['output']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "models"))
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions per graph and thread count")
    parser.add_argument("--previous", type=Path, help="an older runtime graph file to add as a row")
    parser.add_argument("--cache", default=str(ROOT / "models" / ".bench-variants"),
                        help="where derived graphs are kept between runs")
    add_write_option(parser, LAB_LOG)
    parser.add_argument("--fused-only", action="store_true",
                        help="only the shipped graph, the runtime graph and the fused runner (~1 min)")
    args = parser.parse_args(argv)
    model_dir = Path(args.models_dir) / model_files.MODEL_ID
    command = "python bench/kokoro_levers.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started, before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
    body = levers_table(run_levers(model_dir, args.reps, Path(args.cache), args.previous, args.fused_only))
    text = f"{measured_header(started, command, before, speed_before)}\n\n{body}"
    print(text)
    if args.write:
        key = "levers-fused" if args.fused_only else "levers"
        record_round(args.write, SECTIONS[key], key, started, text, CURRENT_ROWS[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
