"""How fast this machine's cores are right now: the int8 GEMM rate a bench table can be read against.

The development VM's speed drifts with its host: the same Kokoro bench gave RTF 0.158 on the long
English text one hour and 0.178-0.198 another, with nothing else of ours running and a load
average near 1 both times. The load average does not see it (the other tenants are outside the
VM), so every generated table also records this probe, taken before and after the run: one
onnxruntime ``MatMulIntegerToFloat`` of the vocoder's largest shape (uint8 weights [128, 1408]
times int8 activations [1408, 20000], the VNNI path the generator's convolutions take), best of 5,
at 1 and 2 intra-op threads. Compare tables by it: a table taken while the probe read 15 % lower
is ~15 % slower for that reason alone.

    .venv/bin/python bench/machine_speed.py        # prints e.g. "int8 GEMM 158 / 311 GMAC/s (1 / 2 threads)"
"""

from __future__ import annotations

import time

import numpy as np

#: The probe's shape: the last generator stage's k = 11 convolution over ~4 s of audio.
ROWS, DEPTH, COLUMNS = 128, 1408, 20_000


def gemm_rate(threads: int, reps: int = 5) -> float:
    """Best-of-``reps`` GMAC/s of one uint8 x int8 ``MatMulIntegerToFloat`` at ``threads`` threads."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = rng.integers(0, 256, (ROWS, DEPTH), dtype=np.uint8)
    node = helper.make_node("MatMulIntegerToFloat", ["w", "x", "w_scale", "x_scale", "w_zero", "x_zero"], ["y"],
                            domain="com.microsoft")
    graph = helper.make_graph(
        [node], "gemm_probe",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [DEPTH, COLUMNS]),
         helper.make_tensor_value_info("x_scale", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
         numpy_helper.from_array(np.array(128, np.uint8), "w_zero"),
         numpy_helper.from_array(np.array(0, np.int8), "x_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": rng.integers(-128, 128, (DEPTH, COLUMNS), dtype=np.int8),
             "x_scale": np.array(0.02, np.float32)}
    session.run(None, feeds)  # warm-up: buffers, thread pool
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - start)
    return ROWS * DEPTH * COLUMNS / best / 1e9


def speed_line() -> str:
    """``int8 GEMM A / B GMAC/s (1 / 2 threads)``: the probe now, for a table's header."""
    return f"int8 GEMM {gemm_rate(1):.0f} / {gemm_rate(2):.0f} GMAC/s (1 / 2 threads)"


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(speed_line())
