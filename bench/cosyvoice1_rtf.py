#!/usr/bin/env python3
"""CosyVoice-300M end to end at full size with random weights: ours (int8 ONNX) against upstream PyTorch.

    flock /work/locks/heavy .venv-ref/bin/python bench/cosyvoice1_rtf.py all --work /tmp/cv1bench --threads 2

Stages, each its own process (peak RSS per stage; ``all`` runs them in order, side by side in one run):

* ``prepare``: upstream ``TransformerLM`` / ``MaskedDiffWithXvec`` / 22.05 kHz ``HiFTGenerator`` at the
  sizes of upstream's ``cosyvoice.yaml`` (tests/helpers/cosyvoice1_reference.py, "full"), random weights,
  written as a ``CosyVoice-300M-SFT`` directory (with stand-ins for campplus and the speech tokenizer).
* ``convert``: ``convert cosyvoice1`` with int8 (the default); time and the directory's size per file.
* ``probe``: this machine's rates for the kinds of work the model does (int8 GEMV of the LLM's decode,
  int8 GEMM of the estimator's linear layers, fp32 attention products, fp32 HiFT convolution), at
  ``--threads`` threads, best of 5: the floor below divides the model's work by them.
* ``upstream``: torch at ``--threads`` threads: zero-shot input (10 prompt-text + 20 text tokens, speaker
  embedding, 150 prompt speech tokens = 3 s, 258 prompt mel frames), the LLM forced through the same
  250 tokens (5 s of audio) then end-of-speech, flow, HiFT; seconds per stage.
* ``ours``: a process without torch, loading the parts as the engine does (all ``threads`` for each, or
  ``--llm-threads`` for the LLM): the same input and forced tokens; seconds per stage, peak RSS.
  ``--model`` picks the converted directory under ``WORK/models`` (default ``cv1-int8``), so two
  conversions (say, before and after a change) can be run side by side.
* ``compare``: ``--models`` (``NAME[:LLM_THREADS]``, comma-separated) in one process, one sentence each in
  turn per round (``--rounds``, after a warm-up), so a busy box loads them alike; medians per model.
* ``ours-stream``: the same sentence streamed as the engine streams v1 (hops of 100 + 20 overlap tokens
  rendered while the LLM decodes): seconds to the first hop's audio, total, RTF, peak RSS.
* ``llm-profile``: the LLM step graph of ``--model`` under onnxruntime's profiler at ``--threads``: the
  same prefill, then the forced tokens one step at a time; per step, the wall time of the run and each
  op type's kernel time, averaged over the first ``PROFILE_WINDOW`` steps (total length ~184-243, where
  docs/benchmarks.md's step figures were taken) and over the last ones (~374-433): over the quietest
  quarter of those steps (the step's own cost on a shared box) and over all of them.
* ``floor``: the compute floor at upstream semantics (10 Euler steps, CFG batch 2, the whole sequence
  attended) from the MAC counts of each stage and the probe's rates, every other op free.

Results are JSON lines: record a run by hand as a round in docs/bench-log/cosyvoice1.md ("CosyVoice-300M")
and update the 'CosyVoice-300M' table of docs/benchmarks.md from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import cpu_model, emit, loadavg, peak_rss_mb  # noqa: E402

N_PROMPT_TEXT, N_TEXT, N_PROMPT_SPEECH, N_TOKENS = 10, 20, 150, 250
PROFILE_WINDOW = 60
EOS = 4096
MODEL_DIR = "CosyVoice-300M-SFT"


def inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"prompt_text": rng.integers(0, 50000, N_PROMPT_TEXT).tolist(),
            "text": rng.integers(0, 50000, N_TEXT).tolist(),
            "prompt_speech": rng.integers(0, 4096, N_PROMPT_SPEECH).tolist(),
            "forced": rng.integers(0, 4096, N_TOKENS).tolist(),
            "prompt_mel": (rng.standard_normal((int(N_PROMPT_SPEECH / 50 * 22050 / 256), 80)) - 4).astype(np.float32),
            "embedding": rng.standard_normal(192).astype(np.float32)}


def audio_seconds() -> float:
    return int(N_TOKENS / 50 * 22050 / 256) * 256 / 22050


def prepare(work: Path) -> None:
    from tests.helpers import cosyvoice1_reference as reference

    started = time.perf_counter()
    reference.write_checkpoint(work / MODEL_DIR, llm=reference.build_llm("full"), flow=reference.build_flow("full"),
                               hift=reference.build_hift("full"), size="full", speakers=reference.SFT_SPEAKERS)
    emit({"stage": "prepare", "seconds": round(time.perf_counter() - started, 1),
          "files_mb": {p.name: round(p.stat().st_size / 1e6, 1) for p in sorted((work / MODEL_DIR).iterdir())}})


def convert(work: Path) -> None:
    from cosyedge.export.cosyvoice.v1.convert import convert as convert_v1

    started = time.perf_counter()
    manifest = convert_v1(work / MODEL_DIR, work / "models" / "cv1-int8", force=True)
    files = manifest["files"]
    total = sum(f["bytes"] for f in files.values())
    upstream_copies = sum(files[n]["bytes"] for n in files if n.startswith(("speech_tokenizer", "campplus")))
    emit({"stage": "convert", "seconds": round(time.perf_counter() - started, 1), "peak_rss_mb": round(peak_rss_mb()),
          "total_mb": round(total / 1e6, 1), "without_upstream_onnx_copies_mb": round((total - upstream_copies) / 1e6, 1),
          "files_mb": {n: round(f["bytes"] / 1e6, 1) for n, f in sorted(files.items())},
          "graphs": {n: g.get("snr_db_vs_fp32") for n, g in manifest["graphs"].items()}})


# -- machine rates ---------------------------------------------------------------------------------

def _session(nodes, inputs_, inits, threads: int):
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(nodes, "probe", inputs_, [helper.make_tensor_value_info("y", 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _best(run, reps: int = 5) -> float:
    run()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def probe(threads: int) -> dict:
    """GMAC/s of the four kinds of work, each as our graphs compute it."""
    import tempfile

    from onnx import TensorProto, helper, numpy_helper

    from cosyedge.export.cosyvoice.common.quantize import quantize_file

    rng = np.random.default_rng(0)
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (m, k, n) in {"int8_gemv": (1, 1024, 4096), "int8_gemm": (1376, 256, 1024)}.items():
            w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32) * 0.05, "w")
            graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "p",
                                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            src, dst = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}.int8.onnx"
            src.write_bytes(model.SerializeToString())
            quantize_file(src, dst, ["MatMul"])
            import onnxruntime as ort
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(str(dst), opts, providers=["CPUExecutionProvider"])
            x = rng.standard_normal((m, k)).astype(np.float32)
            reps = 2000 if m == 1 else 20
            seconds = _best(lambda: [sess.run(None, {"x": x}) for _ in range(reps)]) / reps
            rates[name] = m * k * n / seconds / 1e9
    # The same GEMV as weight-only int8 (``MatMulNBits``, block 128: what the CosyVoice2 LLM uses).
    from cosyedge.export.cosyvoice.common.llm import quantize_blocks

    codes, scale = quantize_blocks(rng.standard_normal((1024, 4096)).astype(np.float32) * 0.05, 8, 128)
    sess = _session([helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain="com.microsoft", K=1024,
                                      N=4096, bits=8, block_size=128, accuracy_level=4)],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                    [numpy_helper.from_array(codes, "w"), numpy_helper.from_array(scale.reshape(-1), "s")], threads)
    x1 = rng.standard_normal((1, 1024)).astype(np.float32)
    rates["int8_gemv_nbits"] = 1024 * 4096 / (_best(lambda: [sess.run(None, {"x": x1}) for _ in range(2000)]) / 2000) / 1e9
    q = rng.standard_normal((16, 688, 64)).astype(np.float32)
    kt = rng.standard_normal((16, 64, 688)).astype(np.float32)
    sess = _session([helper.make_node("MatMul", ["q", "k"], ["y"])],
                    [helper.make_tensor_value_info("q", TensorProto.FLOAT, list(q.shape)),
                     helper.make_tensor_value_info("k", TensorProto.FLOAT, list(kt.shape))], [], threads)
    rates["fp32_attention"] = 16 * 688 * 688 * 64 / _best(lambda: sess.run(None, {"q": q, "k": kt})) / 1e9
    x = rng.standard_normal((1, 128, 16000)).astype(np.float32)
    w = numpy_helper.from_array(rng.standard_normal((128, 128, 11)).astype(np.float32) * 0.05, "w")
    sess = _session([helper.make_node("Conv", ["x", "w"], ["y"], pads=[5, 5])],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))], [w], threads)
    rates["fp32_conv"] = 128 * 128 * 11 * 16000 / _best(lambda: sess.run(None, {"x": x})) / 1e9
    return {k: round(v, 1) for k, v in rates.items()}


def floor(rates: dict) -> dict:
    """Seconds per audio second the model's work takes at the probed rates, each op at its kind's rate."""
    d, units, layers, vocab = 1024, 4096, 14, 4097
    prefill = 1 + 1 + N_PROMPT_TEXT + N_TEXT + 1 + N_PROMPT_SPEECH
    weights = layers * (4 * d * d + 2 * d * units)
    llm_decode = N_TOKENS * (weights + d * vocab)                                              # MAC, M = 1
    llm_prefill = prefill * weights + (N_PROMPT_TEXT + N_TEXT) * 6 * (5 * d * d + 2 * d * units)  # GEMMs
    positions = [prefill + i for i in range(N_TOKENS)]
    llm_attention = sum(layers * 3 * d * t for t in positions) + layers * 3 * d * prefill ** 2 // 2
    frames = int(N_PROMPT_SPEECH / 50 * 22050 / 256) + int(N_TOKENS / 50 * 22050 / 256)
    half = (frames + 1) // 2
    block_linear = 4 * 256 * 512 + 2 * 256 * 1024                                               # per frame
    est_linear = 8 * block_linear * frames + 56 * block_linear * half
    est_attention = 8 * 2 * 512 * frames ** 2 + 56 * 2 * 512 * half ** 2
    c = 256
    resnet = lambda cin: 3 * cin * c + 3 * c * c + cin * c                                     # noqa: E731
    est_conv = ((resnet(320) + resnet(2 * c) + 3 * c * c + 2 * c * c + 3 * c * c + c * 80) * frames  # full rate
                + (13 * resnet(c) + resnet(2 * c) + 3 * c * c + 3 * c * c) * half)           # half rate
    cfm = 10 * 2                                                                                 # steps x CFG rows
    mel = int(N_TOKENS / 50 * 22050 / 256)
    hift_per_frame = (7 * 80 * 512 + 8 * (2 * 256 * 512 + 126 * 256 * 256 + 42 * 256 * 256)
                      + 64 * (2 * 128 * 256 + 126 * 128 * 128 + 66 * 128 * 128 + 7 * 128 * 18))
    work = {
        "llm_decode_int8": (llm_decode, "best_gemv"),
        "llm_prefill_int8": (llm_prefill, "int8_gemm"),
        "llm_attention_fp32": (llm_attention, "fp32_attention"),
        "flow_linear_int8": (cfm * est_linear, "int8_gemm"),
        "flow_attention_fp32": (cfm * est_attention, "fp32_attention"),
        "flow_conv_fp32": (cfm * est_conv, "fp32_conv"),
        "hift_conv_fp32": (mel * hift_per_frame, "fp32_conv"),
    }
    rates = {**rates, "best_gemv": max(rates["int8_gemv"], rates.get("int8_gemv_nbits", 0))}
    seconds = audio_seconds()
    out = {name: {"gmac": round(mac / 1e9, 1), "s_per_audio_s": round(mac / 1e9 / rates[kind] / seconds, 3)}
           for name, (mac, kind) in work.items()}
    out["total_s_per_audio_s"] = round(sum(v["s_per_audio_s"] for v in out.values()), 3)
    return out


# -- the two runs ----------------------------------------------------------------------------------

def upstream(work: Path, threads: int) -> None:
    import torch

    from tests.helpers import cosyvoice1_reference as reference

    torch.set_num_threads(threads)
    inp = inputs()
    llm, flow, hift = reference.build_llm("full"), reference.build_flow("full"), reference.build_hift("full")
    for name, module in (("llm", llm), ("flow", flow), ("hift", hift)):
        state = torch.load(work / MODEL_DIR / f"{name}.pt", map_location="cpu", weights_only=True)
        module.load_state_dict(state, strict=True)
    forced = inp["forced"]

    def choose(ws, decoded, sampling, ignore_eos=True):
        return torch.tensor([forced[len(decoded)] if len(decoded) < len(forced) else EOS])
    llm.sampling_ids = choose
    i32 = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    for rnd in range(2):
        t0 = time.perf_counter()
        tokens = list(llm.inference(text=i32(inp["text"]), text_len=torch.tensor([N_TEXT], dtype=torch.int32),
                                    prompt_text=i32(inp["prompt_text"]),
                                    prompt_text_len=torch.tensor([N_PROMPT_TEXT], dtype=torch.int32),
                                    prompt_speech_token=i32(inp["prompt_speech"]),
                                    prompt_speech_token_len=torch.tensor([N_PROMPT_SPEECH], dtype=torch.int32),
                                    embedding=torch.from_numpy(inp["embedding"])[None]))
        t1 = time.perf_counter()
        mel, _ = flow.inference(token=i32(tokens), token_len=torch.tensor([len(tokens)], dtype=torch.int32),
                                prompt_token=i32(inp["prompt_speech"]),
                                prompt_token_len=torch.tensor([N_PROMPT_SPEECH], dtype=torch.int32),
                                prompt_feat=torch.from_numpy(inp["prompt_mel"])[None],
                                prompt_feat_len=torch.tensor([inp["prompt_mel"].shape[0]]),
                                embedding=torch.from_numpy(inp["embedding"])[None], flow_cache=torch.zeros(1, 80, 0, 2))
        t2 = time.perf_counter()
        with torch.no_grad():
            wav, _ = hift.inference(speech_feat=mel)
        t3 = time.perf_counter()
        emit({"stage": "upstream", "round": rnd, "threads": threads, "tokens": len(tokens),
              "audio_s": round(wav.shape[1] / 22050, 3), "llm_s": round(t1 - t0, 2), "flow_s": round(t2 - t1, 2),
              "hift_s": round(t3 - t2, 2), "rtf": round((t3 - t0) / (wav.shape[1] / 22050), 3),
              "peak_rss_mb": round(peak_rss_mb())})


def _open(work: Path, model_name: str, threads: int, llm_threads: int):
    """The LLM and token2wav of ``WORK/models/<model_name>``, opened as the engine opens them."""
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from cosyedge.engines.cosyvoice.v1.llm import SpeechLMv1
    from cosyedge.engines.cosyvoice.v1.token2wav import Token2WavV1

    model = ModelDir.load(work / "models" / model_name)
    return SpeechLMv1.load(model, threads=llm_threads), Token2WavV1.load(model, threads=threads)


def _synthesize(lm, t2w, inp: dict, rng, levers=None) -> dict:
    """One sentence (the forced tokens) through LLM, flow and HiFT; seconds per stage and the RTF.
    ``levers``: a quality mode's flow steps and CFG schedule (None: upstream's)."""
    forced = inp["forced"]

    def choose(logp, decoded, ignore_eos):
        return forced[len(decoded)] if len(decoded) < len(forced) else EOS
    t0, cpu0 = time.perf_counter(), time.process_time()
    tokens = lm.generate(inp["text"], choose, inp["prompt_text"], inp["prompt_speech"], inp["embedding"])
    t1, cpu1 = time.perf_counter(), time.process_time()
    steps = cfg = None
    if levers is not None:
        steps, cfg = levers.steps, levers.cfg_steps
    mel = t2w.flow(tokens, inp["prompt_speech"], inp["prompt_mel"], inp["embedding"], rng=rng, n_timesteps=steps,
                   cfg_steps=cfg)
    t2 = time.perf_counter()
    wav = t2w.vocoder(mel, rng=rng)
    t3 = time.perf_counter()
    # CPU seconds of the LLM stage: at 1 thread its own compute, whatever else the box runs (not
    # comparable at 2 threads, where a waiting pool thread may spin)
    return {"tokens": len(tokens), "audio_s": round(wav.size / 22050, 3), "llm_s": round(t1 - t0, 2),
            "llm_cpu_s": round(cpu1 - cpu0, 2),
            "flow_s": round(t2 - t1, 2), "hift_s": round(t3 - t2, 2), "rtf": round((t3 - t0) / (wav.size / 22050), 3)}


def ours(work: Path, threads: int, model_name: str = "cv1-int8", llm_threads: int | None = None,
         quality: str = "exact") -> None:
    assert "torch" not in sys.modules
    inp = inputs()
    llm_threads = llm_threads or threads
    started = time.perf_counter()
    lm, t2w = _open(work, model_name, threads, llm_threads)
    load_s = time.perf_counter() - started
    from cosyedge.engines.cosyvoice.common.quality import levers_for

    levers = levers_for(quality)
    rng = np.random.default_rng(0)
    for rnd in range(2):
        emit({"stage": "ours", "model": model_name, "step_format": lm.step_format, "round": rnd, "threads": threads,
              "llm_threads": llm_threads, "quality": quality, "load_s": round(load_s, 2),
              **_synthesize(lm, t2w, inp, rng, levers), "peak_rss_mb": round(peak_rss_mb())})


def _stream_once(lm, t2w, inp: dict, rng) -> dict:
    """One sentence streamed as the engine streams it (hops while the LLM decodes): seconds to the
    first hop's audio, hop count, total seconds and the RTF."""
    from cosyedge.engines.cosyvoice.common.hops import stream_hops

    forced = inp["forced"]

    def choose(logp, decoded, ignore_eos):
        return forced[len(decoded)] if len(decoded) < len(forced) else EOS

    def decode(stop):
        return lm.iter_tokens(inp["text"], choose, inp["prompt_text"], inp["prompt_speech"], inp["embedding"],
                              cancelled=stop)
    renderer = t2w.stream(np.asarray(inp["prompt_speech"]), inp["prompt_mel"], inp["embedding"], rng=rng)
    started, first, samples, hops = time.perf_counter(), None, 0, 0
    for audio, _ in stream_hops(decode, renderer):
        first = first if first is not None else time.perf_counter() - started
        samples, hops = samples + audio.size, hops + 1
    total = time.perf_counter() - started
    return {"first_audio_s": round(first, 2), "hops": hops, "total_s": round(total, 2),
            "audio_s": round(samples / 22050, 3), "rtf": round(total / (samples / 22050), 3)}


def ours_stream(work: Path, threads: int, model_name: str, llm_threads: int | None, rounds: int) -> None:
    """The streamed sentence (``_stream_once``) ``rounds`` times after a warm-up; peak RSS."""
    assert "torch" not in sys.modules
    inp = inputs()
    llm_threads = llm_threads or threads
    lm, t2w = _open(work, model_name, threads, llm_threads)
    for rnd in range(rounds + 1):
        emit({"stage": "ours-stream", "model": model_name, "round": rnd, "threads": threads,
              "llm_threads": llm_threads, **_stream_once(lm, t2w, inp, np.random.default_rng(rnd)),
              "peak_rss_mb": round(peak_rss_mb()), "loadavg": loadavg()})


def compare(work: Path, threads: int, models: list[str], rounds: int) -> None:
    """``models`` (``NAME`` or ``NAME:LLM_THREADS``) in one process, one sentence each in turn per round,
    so that all see the same load; per round and the medians (peak RSS: run ``ours`` per model)."""
    assert "torch" not in sys.modules
    inp = inputs()
    opened = {}
    for spec in models:
        name, _, llm = spec.partition(":")
        opened[spec] = _open(work, name, threads, int(llm or threads))
    results: dict[str, list[dict]] = {spec: [] for spec in opened}
    for rnd in range(rounds + 1):  # round 0 warms the sessions up and is not counted
        for spec, (lm, t2w) in opened.items():
            record = _synthesize(lm, t2w, inp, np.random.default_rng(rnd))
            if rnd:
                results[spec].append(record)
            emit({"stage": "compare", "model": spec, "round": rnd, **record,
                  "loadavg": loadavg()})
    for spec, records in results.items():
        emit({"stage": "compare-median", "model": spec, "rounds": rounds,
              **{k: round(float(np.median([r[k] for r in records])), 3)
                 for k in ("llm_s", "llm_cpu_s", "flow_s", "hift_s", "rtf")},
              "rtf_range": [min(r["rtf"] for r in records), max(r["rtf"] for r in records)]})


def llm_profile(work: Path, threads: int, model_name: str = "cv1-int8") -> None:
    """Per decode step: the run's wall time and each op type's kernel time (onnxruntime's profiler)."""
    import bisect
    import collections

    import onnxruntime as ort

    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from cosyedge.engines.cosyvoice.v1.llm import SpeechLMv1

    inp = inputs()
    model = ModelDir.load(work / "models" / model_name)
    lm = SpeechLMv1.load(model, threads=threads)
    opts = ort.SessionOptions()  # the engine's options (common.llm.make_session) + the profiler
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(work / f"profile-{model_name}")
    lm.step_session = ort.InferenceSession(str(model.file(model.config("llm")["files"]["step"])), opts,
                                           providers=["CPUExecutionProvider"])
    prompt = lm.build_prompt(inp["text"], inp["prompt_text"], inp["prompt_speech"], inp["embedding"])
    step = lm.steps(len(prompt) + N_TOKENS)
    step(prompt)
    for token in inp["forced"]:
        step(lm.embed_speech([token]))
    del step
    events = json.loads(Path(lm.step_session.end_profiling()).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    per_run = [collections.Counter() for _ in runs]
    starts = [start for start, _ in runs]
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_run[bisect.bisect_right(starts, e["ts"]) - 1][e["args"]["op_name"]] += e["dur"]
    for label, window in (("first", slice(1, 1 + PROFILE_WINDOW)), ("last", slice(-PROFILE_WINDOW, None))):
        chosen = list(range(len(runs)))[window]
        # On a shared box other jobs stretch some steps: the quietest quarter (by wall time) is the
        # step's own cost; the mean over all is given beside it.
        quiet = sorted(chosen, key=lambda i: runs[i][1] - runs[i][0])[:max(1, len(chosen) // 4)]
        record = {"stage": "llm-profile", "model": model_name, "step_format": lm.step_format, "threads": threads,
                  "window": label, "total_length": [len(prompt) + chosen[0], len(prompt) + chosen[-1]]}
        for name, steps in (("quietest_quarter", quiet), ("all", chosen)):
            wall = sum(runs[i][1] - runs[i][0] for i in steps) / len(steps) / 1000
            ops = collections.Counter()
            for i in steps:
                ops.update(per_run[i])
            ops_ms = {op: round(us / len(steps) / 1000, 3) for op, us in ops.most_common()}
            nbits = ops_ms.get("MatMulNBits", 0.0)
            record[name] = {"step_ms": round(wall, 2), "matmulnbits_ms": nbits,
                            "all_but_matmulnbits_share": round(1 - nbits / wall, 3), "kernel_ms_by_op": ops_ms}
        emit(record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("all", "prepare", "convert", "probe", "upstream", "ours", "llm-profile",
                                          "compare", "ours-stream"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/cv1bench"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="cv1-int8", help="ours, llm-profile: the directory under WORK/models")
    parser.add_argument("--llm-threads", type=int, default=None,
                        help="ours: the LLM's threads (default: --threads, as the engine sets them)")
    parser.add_argument("--models", default="cv1-int8", help="compare: NAME[:LLM_THREADS],... under WORK/models")
    parser.add_argument("--rounds", type=int, default=6, help="compare: rounds counted (after one warm-up)")
    parser.add_argument("--quality", default="exact",
                        help="ours: the quality mode whose flow steps and CFG schedule run (exact, balanced, live)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "all":
        emit({"stage": "machine", "loadavg": loadavg(), "cpu": cpu_model()})
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        venv = ROOT / ".venv" / "bin" / "python"
        for stage in ("prepare", "convert", "probe", "upstream", "ours"):
            python = str(venv) if stage == "ours" and venv.exists() else sys.executable
            subprocess.run([python, __file__, stage, "--work", str(args.work), "--threads", str(args.threads)],
                           check=True, env=env)
        emit({"stage": "done", "loadavg": loadavg()})
        return 0
    if args.stage == "probe":
        rates = probe(args.threads)
        emit({"stage": "probe", "threads": args.threads, "gmac_per_s": rates, "floor": floor(rates)})
        return 0
    {"prepare": lambda: prepare(args.work), "convert": lambda: convert(args.work),
     "upstream": lambda: upstream(args.work, args.threads),
     "ours": lambda: ours(args.work, args.threads, args.model, args.llm_threads, args.quality),
     "llm-profile": lambda: llm_profile(args.work, args.threads, args.model),
     "compare": lambda: compare(args.work, args.threads, args.models.split(","), args.rounds),
     "ours-stream": lambda: ours_stream(args.work, args.threads, args.model, args.llm_threads, args.rounds)}[args.stage]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
