"""What each fused step of ``fused_ops`` buys in the fused Kokoro runner (issue 2, speed).

    .venv/bin/python bench/kokoro_fused_ops.py --reps 5
    .venv/bin/python bench/kokoro_fused_ops.py --reps 5 --write docs/benchmarks.md

One ``FusedSession`` per row and thread count, all in one process: the chain runner alone
(``ops=()``, main's runner), then each ``fused_ops`` kind added in turn; run interleaved on the
levers input (``kokoro_rtf.variant_feeds``). Columns: process CPU time of one run at 1 intra-op
thread, wall and CPU at 2 threads (medians), and the audio's band distance from the shipped
graph (the setup check's measure; tolerance 2.0 dB). Compare rows side by side: on a shared
machine only the 1-thread CPU column is steady.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cosyedge.engines.kokoro import fused_ops, model_files, optimize  # noqa: E402
from kokoro_rtf import VARIANT_TEXT, load_average, measured_header, variant_feeds, write_section  # noqa: E402


def variants() -> list[tuple[str, tuple[str, ...]]]:
    rows = [("chains only (main's runner)", ())]
    for i, kind in enumerate(fused_ops.KINDS):
        rows.append((f"+ {kind}", fused_ops.KINDS[:i + 1]))
    return rows


def run(model_dir: Path, reps: int) -> dict:
    from cosyedge.engines.kokoro.engine import make_session
    from cosyedge.engines.kokoro.fused_runtime import FusedSession

    manifest_graph = model_dir / "kokoro-v1.0.int8.conv-as-matmul.onnx"
    feeds, n_phonemes = variant_feeds(model_dir)
    shipped = make_session(model_dir / model_files.ONNX_NAME, 1, "all").run(None, feeds)[0].reshape(-1)
    rows = variants()
    sessions = {(label, t): FusedSession(manifest_graph, t, ops=ops) for label, ops in rows for t in (1, 2)}
    audio = {label: sessions[(label, 1)].run(None, feeds)[0].reshape(-1) for label, _ in rows}
    for (label, t), session in sessions.items():
        if t == 2:
            session.run(None, feeds)  # warm-up
    cpu1 = {label: [] for label, _ in rows}
    wall2 = {label: [] for label, _ in rows}
    cpu2 = {label: [] for label, _ in rows}
    for _ in range(reps):
        for label, _ in rows:
            c0 = time.process_time()
            sessions[(label, 1)].run(None, feeds)
            cpu1[label].append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            sessions[(label, 2)].run(None, feeds)
            wall2[label].append(time.perf_counter() - t0)
            cpu2[label].append(time.process_time() - c0)
    base = statistics.median(cpu1[rows[0][0]])
    out = []
    for label, ops in rows:
        same = np.array_equal(audio[label], audio[rows[0][0]])
        out.append({"label": label, "cpu1": statistics.median(cpu1[label]), "cpu1_min": min(cpu1[label]),
                    "saved": base - statistics.median(cpu1[label]), "wall2": statistics.median(wall2[label]),
                    "wall2_min": min(wall2[label]), "cpu2": statistics.median(cpu2[label]),
                    "segments": sessions[(label, 1)].segments,
                    "distance": optimize.spectral_distance_db(shipped, audio[label]),
                    "same_as_first": same})
    return {"rows": out, "reps": reps, "phonemes": n_phonemes, "audio_s": shipped.size / 24_000}


def table(res: dict) -> str:
    lines = [f"Input: {VARIANT_TEXT[1]} {VARIANT_TEXT[0]} text, {res['phonemes']} phonemes -> {res['audio_s']:.2f} s "
             f"of audio; {res['reps']} interleaved repetitions, medians (best in brackets); CPU = process CPU time "
             "of one run.", "",
             "| runner | segments | CPU ms, 1 thread | saved vs first row | wall ms, 2 threads | CPU ms, 2 threads "
             "| RTF at 2 threads | band distance vs shipped |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['label']} | {r['segments']} | {r['cpu1'] * 1e3:.0f} ({r['cpu1_min'] * 1e3:.0f}) "
                     f"| {r['saved'] * 1e3:+.0f} | {r['wall2'] * 1e3:.0f} ({r['wall2_min'] * 1e3:.0f}) "
                     f"| {r['cpu2'] * 1e3:.0f} | {r['wall2'] / res['audio_s']:.3f} | {r['distance']:.3f} dB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "models"))
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions per row and thread count")
    parser.add_argument("--write", metavar="DOC", help="update the generated block in this markdown file")
    args = parser.parse_args(argv)
    command = "python bench/kokoro_fused_ops.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started, before = dt.datetime.now(dt.timezone.utc), load_average()
    body = table(run(Path(args.models_dir) / model_files.MODEL_ID, args.reps))
    text = f"{measured_header(started, command, before)}\n\n{body}"
    print(text)
    if args.write:
        write_section(Path(args.write), "fused-ops", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
