"""Weight int8 quantization of exported graphs, decided per graph, with a deviation report.

Plan (:data:`PLAN`), from measurements on random- and full-size graphs (docs/bench-log/cosyvoice.md):

* flow encoder and CFM estimator: dynamic int8 (int8 weights, per-call uint8 activations) for MatMul
  and Gemm - nearly all of their FLOPs and bytes. The estimator's weights are per output channel
  (+3 dB SNR at the same speed), and the MatMuls on its U-Net trunk stay fp32: each resnet's 1x1
  ``res_conv`` (the trunk has no identity skip there, so its error accumulates over the 14 resnets),
  the stage output convs and the final projection (measured: all int8 24.5 dB, these fp32 32.4 dB,
  speed within 1 %).
* HiFT F0 predictor: fp32. Its output is a pitch in Hz; small relative errors are audible as detuning
  and the graph is tiny.
* HiFT decoder: fp32. Conv-only (ORT's dynamic ConvInteger is slower than fp32 Conv on CPU), and its
  output layer feeds ``exp`` (magnitude), which amplifies weight error.

Each graph's entry in the manifest's ``graphs`` section says what was done and, for quantized graphs,
the SNR of the int8 output against fp32 on a fixed random input.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: Graph file -> op types to quantize (empty: keep fp32, with the reason).
PLAN: dict[str, dict[str, Any]] = {
    "flow_encoder.onnx": {"ops": ["MatMul", "Gemm"]},
    "flow_estimator.onnx": {"ops": ["MatMul", "Gemm"], "per_channel": True,
                            "keep_fp32": [r"^/(down|mid|up)_blocks\.\d+\.0/MatMul$",   # resnet res_conv
                                          r"^/(down|up)_blocks\.0\.2/MatMul$",          # stage output conv
                                          r"^/MatMul$"]},                                # final_proj
    # The chunk-step forms of the same weights (streaming); their node names differ, so no fp32 list.
    "flow_encoder_stream.onnx": {"ops": ["MatMul", "Gemm"]},
    "flow_estimator_stream.onnx": {"ops": ["MatMul", "Gemm"], "per_channel": True},
    "hift_f0.onnx": {"ops": [], "why": "pitch output; tiny graph"},
    # CosyVoice-300M (cosyedge.export.cosyvoice.v1.convert): its LLM graphs and the length regulator.
    "llm_text_encoder.onnx": {"ops": ["MatMul", "Gemm"]},
    "flow_regulator.onnx": {"ops": [], "why": "conv-only, 80 channels; tiny graph"},
    "hift_decoder.onnx": {"ops": [], "why": "conv-only; exp() magnitude output amplifies weight error"},
}


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """10 log10(signal power / error power); +inf when identical."""
    reference = np.asarray(reference, dtype=np.float64)
    err = float(np.sum((reference - np.asarray(test, dtype=np.float64)) ** 2))
    sig = float(np.sum(reference ** 2))
    if err == 0.0:
        return math.inf
    return 10.0 * math.log10(max(sig, 1e-30) / err)


def _example_inputs(session, rng: np.random.Generator, overrides: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Random inputs for any of our graphs, with consistent dynamic sizes (50 frames, 25 tokens)."""
    # (v1 LLM step: L new positions after P cached ones, T = P + L; v1 speech tokens are < 4096.)
    sizes = {"n_tokens": 25, "n_frames": 50, "batch": 2, "n_stft": 50 * 120 + 1, "n": 7, "L": 1, "P": 1, "T": 2,
             **(overrides or {})}
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else sizes.get(d, 1) for d in inp.shape]
        if inp.type == "tensor(int64)":
            feeds[inp.name] = rng.integers(0, 4096, size=shape, dtype=np.int64)
        elif inp.name == "mask":
            feeds[inp.name] = np.ones(shape, dtype=np.float32)
        elif inp.type == "tensor(float16)":  # the streamed estimator's key/value cache in int8 models
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float16)
        elif inp.name == "t":
            feeds[inp.name] = rng.random(shape, dtype=np.float32)
        else:
            feeds[inp.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


def output_snr(fp32_path: Path, int8_path: Path, seed: int = 0,
               sizes: dict[str, int] | None = None) -> dict[str, float]:
    """SNR (dB) of each output of the int8 graph against the fp32 graph on one random input."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    ref = ort.InferenceSession(str(fp32_path), opts, providers=["CPUExecutionProvider"])
    test = ort.InferenceSession(str(int8_path), opts, providers=["CPUExecutionProvider"])
    feeds = _example_inputs(ref, np.random.default_rng(seed), sizes)
    names = [o.name for o in ref.get_outputs()]
    return {name: round(snr_db(a, b), 2) for name, a, b in zip(names, ref.run(None, feeds),
                                                                test.run(None, feeds))}


def quantize_file(src: Path, dst: Path, ops: list[str], per_channel: bool = False,
                  exclude: list[str] | None = None) -> None:
    """Dynamic int8 quantization of ``ops`` (weights int8, symmetric) from ``src`` into ``dst``.

    ``exclude``: node names left in fp32.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), op_types_to_quantize=ops, weight_type=QuantType.QInt8,
                     per_channel=per_channel, nodes_to_exclude=list(exclude or []),
                     extra_options={"MatMulConstBOnly": True})


def nodes_matching(path: Path, patterns: list[str]) -> list[str]:
    """Names of the nodes in graph ``path`` that match any of the regular expressions ``patterns``."""
    import re

    import onnx

    if not patterns:
        return []
    model = onnx.load(str(path), load_external_data=False)
    return [n.name for n in model.graph.node if any(re.search(p, n.name) for p in patterns)]


def quantize_in_place(ctx, name: str) -> None:
    """Apply :data:`PLAN` to graph ``name`` in the export directory and record the outcome."""
    plan = PLAN.get(name, {"ops": [], "why": "no plan for this graph"})
    path = ctx.out / name
    if not plan["ops"]:
        ctx.quantization[name] = {"precision": "fp32", "why": plan.get("why", "")}
        return
    tmp = path.with_suffix(".int8.onnx")
    keep = nodes_matching(path, plan.get("keep_fp32", []))
    quantize_file(path, tmp, plan["ops"], per_channel=plan.get("per_channel", False), exclude=keep)
    snr = output_snr(path, tmp)
    before, after = path.stat().st_size, tmp.stat().st_size
    tmp.replace(path)
    ctx.quantization[name] = {"precision": "int8", "ops": plan["ops"], "snr_db_vs_fp32": snr,
                              "bytes_fp32": before, "bytes_int8": after,
                              "per_channel": plan.get("per_channel", False), "fp32_nodes": len(keep)}
    logger.info("%s: int8 %s, %d -> %d bytes, SNR %s dB", name, plan["ops"], before, after, snr)


# ----------------------------------------------------------------------------------------------
# float16 storage of float32 weights (disk only; the graphs still compute in float32)
# ----------------------------------------------------------------------------------------------

#: Graphs whose remaining float32 weights (convolutions, the token embedding) are stored as float16
#: by ``--quantize int8``. The LLM writes its own files; the frontend ONNX files are the user's copies.
COMPACT_GRAPHS = ("flow_encoder.onnx", "flow_estimator.onnx", "flow_encoder_stream.onnx",
                  "flow_estimator_stream.onnx", "hift_f0.onnx", "hift_decoder.onnx")
FP16_MIN_ELEMENTS = 1024


def store_weights_fp16(src: Path, dst: Path, min_elements: int = FP16_MIN_ELEMENTS) -> int:
    """Rewrite ``src`` into ``dst`` with each float32 initializer of ``min_elements`` or more stored as
    float16 behind a ``Cast`` to float32; return how many were converted.

    onnxruntime folds the casts when it loads the graph, so the session holds and computes with float32
    weights exactly as before, rounded to float16 precision (relative error <= 2^-11). Tensors with
    values beyond float16's range are left alone.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    graph_inputs = {i.name for i in graph.input}
    casts = []
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or init.name in graph_inputs:
            continue
        array = numpy_helper.to_array(init)
        if array.size < min_elements or not np.all(np.abs(array) <= np.finfo(np.float16).max):
            continue
        name = init.name
        init.CopyFrom(numpy_helper.from_array(array.astype(np.float16), name + "__fp16"))
        casts.append(helper.make_node("Cast", [name + "__fp16"], [name], to=TensorProto.FLOAT,
                                      name="fp16_storage_" + name))
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.save_model(model, str(dst))
    return len(casts)


def _stft_size(ctx) -> dict[str, int]:
    """The HiFT decoder's STFT length for the 50 frames of :func:`_example_inputs` (480 or 256 samples a frame)."""
    hift = ctx.runtime.get("hift", {})
    return {"n_stft": 50 * int(hift.get("samples_per_frame", 480)) // int(hift.get("hop_len", 4)) + 1}


def compact_float_weights(ctx) -> None:
    """Converter step "compact" (``--quantize int8`` only): float16 storage for :data:`COMPACT_GRAPHS`.

    Records per graph the tensors converted, the bytes before/after and the SNR of the outputs
    against the same graph with float32 storage, on one random input.
    """
    if ctx.quantize != "int8":
        return
    for name in COMPACT_GRAPHS:
        path = ctx.out / name
        if name not in ctx.files or not path.is_file():
            continue
        tmp = path.with_suffix(".fp16w.onnx")
        count = store_weights_fp16(path, tmp)
        snr = output_snr(path, tmp, sizes=_stft_size(ctx))
        before, after = path.stat().st_size, tmp.stat().st_size
        tmp.replace(path)
        ctx.quantization.setdefault(name, {})["weight_storage"] = {
            "float16_tensors": count, "bytes_before": before, "bytes_after": after, "snr_db_vs_float32_storage": snr}
        logger.info("%s: %d float32 weights stored as float16, %d -> %d bytes, SNR %s dB", name, count, before,
                    after, snr)
