"""Where the CosyVoice2 CFM estimator spends its time: onnxruntime op profile, grouped by kind.

Runs one or more estimator graphs on upstream's batch-2 CFG input (default 650 frames = 3 s prompt +
10 s target), with onnxruntime's profiler on, and reports per graph the process CPU time per call and
the profiled kernel time split into linear layers, attention (activation x activation MatMuls and
softmax, or the fused MultiHeadAttention op), convolutions, normalisation and the rest. Kernel times are
wall-clock durations: on a loaded machine they stretch, so read them as shares of the total. Also prints the MAC count of each kind so the
achieved rate (GMAC/s) can be compared with what the CPU can do.

    .venv/bin/python bench/cosyvoice_estimator_profile.py /tmp/x/fp32/flow_estimator.onnx \
        /tmp/x/int8/flow_estimator.onnx --threads 1 --frames 650 --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np


def estimator_macs(frames: int, batch: int = 2, dim: int = 256, heads: int = 8, head_dim: int = 64,
                   blocks: int = 56, mid: int = 12, in_ch: int = 320) -> dict[str, float]:
    """Multiply-accumulates of one CosyVoice2 estimator call, by kind (upstream's default sizes)."""
    inner = heads * head_dim
    n = batch * frames
    linear = blocks * n * (3 * dim * inner + inner * dim + 2 * dim * 4 * dim)
    attention = blocks * batch * heads * 2 * frames * frames * head_dim

    def resnet(cin: int) -> int:  # two k3 convs + the 1x1 res conv, per frame
        return cin * dim * 3 + dim * dim * 3 + cin * dim

    conv = n * (resnet(in_ch) + mid * resnet(dim) + resnet(2 * dim) + 3 * dim * dim * 3 + dim * 80)
    return {"linear": linear, "attention": attention, "conv": conv}


def kind_of(op: str, shapes: list) -> str:
    """Classify a profiled kernel by op type and input shapes."""
    if op in ("MatMul", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat", "Gemm", "QGemm",
              "DynamicQuantizeMatMul", "MatMulNBits", "QLinearMatMul"):
        ranks = [len(s) for s in shapes[:2]]
        # activation x activation: both operands carry the batch and head axes (rank 4)
        return "attention" if ranks and min(ranks) >= 4 else "linear"
    if op in ("Softmax", "MultiHeadAttention", "Attention"):
        return "attention"
    if op in ("Conv", "ConvInteger", "FusedConv", "QLinearConv"):
        return "conv"
    if "Norm" in op:
        return "norm"
    if op in ("DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear"):
        return "quantize"
    return "other"


def profile(path: Path, threads: int, frames: int, reps: int) -> dict:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "prof")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 80, frames), dtype=np.float32),
             "mask": np.ones((2, 1, frames), dtype=np.float32),
             "mu": rng.standard_normal((2, 80, frames), dtype=np.float32),
             "t": np.array([0.3, 0.3], dtype=np.float32),
             "spks": rng.standard_normal((2, 80), dtype=np.float32),
             "cond": rng.standard_normal((2, 80, frames), dtype=np.float32)}
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}}
    sess.run(None, feeds)  # warm-up (allocations, pre-packing)
    cpu, wall = [], []
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        sess.run(None, feeds)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    prof = json.loads(Path(sess.end_profiling()).read_text())
    by_kind: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    n_runs = 0
    for ev in prof:
        if ev.get("cat") == "Session" and ev.get("name") == "model_run":
            n_runs += 1
        if ev.get("cat") != "Node" or not ev.get("name", "").endswith("_kernel_time"):
            continue
        args = ev.get("args", {})
        op = args.get("op_name", "?")
        shapes = [next(iter(d.values())) for d in args.get("input_type_shape", [])]
        by_kind[kind_of(op, shapes)] += ev["dur"]
        by_op[op] += ev["dur"]
    scale = 1e-6 / max(n_runs, 1)
    return {"graph": str(path), "threads": threads, "frames": frames,
            "cpu_s_per_call": min(cpu), "wall_s_per_call": min(wall),
            "kernel_s_by_kind": {k: round(v * scale, 4) for k, v in sorted(by_kind.items(), key=lambda x: -x[1])},
            "kernel_s_by_op": {k: round(v * scale, 4) for k, v in sorted(by_op.items(), key=lambda x: -x[1])[:12]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", type=Path, nargs="+")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--frames", type=int, default=650)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    macs = estimator_macs(args.frames)
    print(json.dumps({"load_before": os.getloadavg(), "gmac_per_call": {k: round(v / 1e9, 2) for k, v in macs.items()}}))
    for path in args.graphs:
        result = profile(path, args.threads, args.frames, args.reps)
        ks = dict(result["kernel_s_by_kind"])
        kinds = dict(macs)
        if not ks.get("conv"):  # convolutions exported as MatMuls are profiled as linear layers
            kinds = {"linear": macs["linear"] + macs["conv"], "attention": macs["attention"]}
        result["gmac_per_s"] = {k: round(kinds[k] / 1e9 / ks[k], 1) for k in kinds if ks.get(k)}
        print(json.dumps(result), flush=True)
    print(json.dumps({"load_after": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
