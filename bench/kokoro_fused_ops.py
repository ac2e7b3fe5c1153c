"""What each fused step of ``fused_ops`` buys in the fused Kokoro runner (issue 2, speed).

    .venv/bin/python bench/kokoro_fused_ops.py --reps 5
    .venv/bin/python bench/kokoro_fused_ops.py --reps 5 --write   # recorded in docs/bench-log/kokoro.md
    .venv/bin/python bench/kokoro_fused_ops.py --stft-check   # the fused STFT vs onnxruntime's node

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

from cosyedge.engines.kokoro import fused_ops, model_files  # noqa: E402
from cosyedge.export.kokoro import checks  # noqa: E402
from bench.common import LOG_DIR, add_write_option, load_average, measured_header, record_round  # noqa: E402
from bench.kokoro_rtf import VARIANT_TEXT, variant_feeds  # noqa: E402
from bench.machine_speed import speed_line  # noqa: E402


#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTION = "Round 4: the fused runner's remaining single-threaded ops (`fused_ops`; branch kops)"
CURRENT_ROWS = "none (history: what each fused step saves; the engine rows come from bench/kokoro_rtf.py)"


def variants() -> list[tuple[str, tuple[str, ...]]]:
    rows = [("chains only (main's runner)", ())]
    for i, kind in enumerate(fused_ops.KINDS):
        rows.append((f"+ {kind}", fused_ops.KINDS[:i + 1]))
    return rows


def run(model_dir: Path, reps: int) -> dict:
    from cosyedge.engines.kokoro.sessions import make_session
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
                    "distance": checks.spectral_distance_db(shipped, audio[label]),
                    "same_as_first": same})
    return {"rows": out, "reps": reps, "phonemes": n_phonemes, "audio_s": shipped.size / 24_000}


def _exact_dft_basis(hop: int, window: np.ndarray) -> np.ndarray:
    """The textbook windowed DFT basis, imaginary rows of the DC and Nyquist bins exactly 0."""
    angle = np.arange(window.size // 2 + 1)[:, None] * np.arange(window.size)[None] * 2 * np.pi / window.size
    imag = -np.sin(angle) * window
    imag[[0, -1]] = 0.0
    return np.concatenate([np.cos(angle) * window, imag]).astype(np.float32)


def stft_check(model_dir: Path) -> str:
    """The fused STFT against onnxruntime's node on the real source of the levers input, with
    onnxruntime's impulse basis (what the step uses) and with an exact DFT basis: max abs
    difference, phase flips (the graph's atan/Where phase) on the DC and Nyquist bins of frames
    where that bin is negative, and the runner's band distance from the shipped graph."""
    from unittest import mock

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from cosyedge.engines.kokoro import kernels
    from cosyedge.engines.kokoro.sessions import make_session
    from cosyedge.engines.kokoro.fused_runtime import FusedSession

    path = model_dir / "kokoro-v1.0.int8.conv-as-matmul.onnx"
    feeds, _ = variant_feeds(model_dir)
    model = onnx.load(str(path))
    (spec,) = fused_ops.find_spectra(model.graph)
    for name in (spec.signal, spec.real, spec.imag):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    signal, real_ref, imag_ref = ort.InferenceSession(model.SerializeToString(), opts).run(
        [spec.signal, spec.real, spec.imag], feeds)
    del model
    shipped = make_session(model_dir / model_files.ONNX_NAME, 1, "all").run(None, feeds)[0].reshape(-1)
    kernels.compile_kernels()

    def phase(real, imag):
        with np.errstate(divide="ignore", invalid="ignore"):
            base = np.arctan(imag / real)
        return np.where(real < 0, np.where(imag > 0, base + np.pi, base - np.pi), base)

    lines = [f"STFT input: {signal.shape[-1]} samples, {real_ref.shape[-1]} frames; values up to "
             f"{np.abs(real_ref).max():.2f}.", "",
             "| basis | max abs diff real / imag | phase flips on negative DC / Nyquist bins | band distance vs shipped |",
             "|---|---|---|---|"]
    for label, basis in (("onnxruntime's impulse basis (the step)", fused_ops.onnxruntime_stft_basis),
                         ("exact DFT, exact zeros on DC/Nyquist", _exact_dft_basis)):
        with mock.patch.object(fused_ops, "onnxruntime_stft_basis", basis):
            out = fused_ops.SpectrumStep(spec).run({spec.signal: signal}, None)
            runner = FusedSession(path, 1)
            audio = runner.run(None, feeds)[0].reshape(-1)
            runner.close()
        real, imag = out[spec.real][0], out[spec.imag][0]
        flips = []
        for b in (0, spec.bins - 1):
            negative = real_ref[0, b] < 0
            moved = np.abs(phase(real[b], imag[b]) - phase(real_ref[0, b], imag_ref[0, b])) > 1
            flips.append(f"{np.count_nonzero(moved & negative)} of {np.count_nonzero(negative)}")
        lines.append(f"| {label} | {np.abs(real - real_ref[0]).max():.1e} / {np.abs(imag - imag_ref[0]).max():.1e} "
                     f"| {' / '.join(flips)} | {checks.spectral_distance_db(shipped, audio):.3f} dB |")
    return "\n".join(lines)


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
    add_write_option(parser, LAB_LOG)
    parser.add_argument("--stft-check", action="store_true",
                        help="only the fused STFT against onnxruntime's node (impulse vs exact DFT basis)")
    args = parser.parse_args(argv)
    if args.stft_check:
        print(stft_check(Path(args.models_dir) / model_files.MODEL_ID))
        return 0
    command = "python bench/kokoro_fused_ops.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started, before, speed_before = dt.datetime.now(dt.timezone.utc), load_average(), speed_line()
    body = table(run(Path(args.models_dir) / model_files.MODEL_ID, args.reps))
    text = f"{measured_header(started, command, before, speed_before)}\n\n{body}"
    print(text)
    if args.write:
        record_round(args.write, SECTION, "fused-ops", started, text, CURRENT_ROWS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
