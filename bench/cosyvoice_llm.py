#!/usr/bin/env python3
"""CosyVoice2 LLM benchmark: full-size random weights, our ONNX fp32 / int8 against upstream PyTorch.

    .venv-ref/bin/python bench/cosyvoice_llm.py all --work /tmp/cv2bench [--threads 2] [--size full]

Stages (each its own process, so peak RSS is per stage; ``all`` runs them in order):

* ``prepare``: upstream ``Qwen2LM`` at CosyVoice2-0.5B size (Qwen2.5-0.5B dims, random init, seed 0),
  saved as ``llm.pt`` + ``CosyVoice-BlankEN/config.json``, and full-size flow/HiFT via the test
  reference, in the official layout.
* ``convert``: our converter, int8 (flow + HiFT + LLM), and the LLM alone in fp32.
* ``llm``: one process holding upstream PyTorch, ORT fp32 and ORT int8. The same 107-position prompt
  (sos + 10 prompt-text + 20 text + task + 75 prompt speech, as upstream-cpu-baseline.md) and the same
  forced tokens (250, or ``--steps``), rounds interleaved A/B/C so that machine load hits all three alike. Also the
  teacher-forced drift of int8 (and of the int8 text table) against upstream's log-probs.
* ``onnx``: ONNX fp32 vs int8 decode only (no torch), cheap to repeat on a quiet machine.
* ``e2e``: a process without torch, loading as the engine does: LLM (prefill + 250 decode steps) +
  token2wav for 250 tokens (10 s of audio) with a 75-token / 150-frame prompt, twice; optionally a
  speech-tokenizer stand-in of the real size first (``--prompt-tokenizer fp32|int8``: a clone request
  with a new voice). RTF, CPU time, VmRSS and peak RSS per stage, the directory's size per file.

Results are printed as JSON lines: record a run by hand as a round in docs/bench-log/cosyvoice.md ("CosyVoice
LLM") and update the LLM and end-to-end rows of docs/benchmarks.md's CosyVoice2-0.5B table from it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import emit, peak_rss_mb  # noqa: E402

QWEN_FULL = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False,
                 sliding_window=None, max_window_layers=24)
N_PROMPT_TEXT, N_TEXT, N_PROMPT_SPEECH, N_DECODE = 10, 20, 75, 250
EOS = 6561


def inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"prompt_text": rng.integers(0, 151643, N_PROMPT_TEXT).tolist(),
            "text": rng.integers(0, 151643, N_TEXT).tolist(),
            "prompt_speech": rng.integers(0, 6561, N_PROMPT_SPEECH).tolist(),
            "forced": rng.integers(0, 6561, N_DECODE).tolist()}


def build_upstream_llm(size: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.helpers import cosyvoice_reference as _reference
    _reference.install_shim()
    import functools

    import torch
    from cosyvoice.llm.llm import Qwen2Encoder, Qwen2LM
    from cosyvoice.utils.common import ras_sampling

    cfg = dict(QWEN_FULL)
    if size == "tiny":
        cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   max_window_layers=2)
    torch.manual_seed(0)
    enc = Qwen2Encoder.__new__(Qwen2Encoder)
    torch.nn.Module.__init__(enc)
    enc.model = Qwen2ForCausalLM(Qwen2Config(**cfg))
    llm = Qwen2LM(llm_input_size=cfg["hidden_size"], llm_output_size=cfg["hidden_size"], speech_token_size=6561,
                  llm=enc, sampling=functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1),
                  length_normalized_loss=True, lsm_weight=0, mix_ratio=[5, 15]).eval()
    return llm, Qwen2Config(**cfg)


def stage_prepare(work: Path, size: str) -> None:
    import torch

    from tests.helpers import cosyvoice_reference as _reference

    src = work / "src"
    t = time.perf_counter()
    llm, cfg = build_upstream_llm(size)
    (src / "CosyVoice-BlankEN").mkdir(parents=True, exist_ok=True)
    cfg.to_json_file(str(src / "CosyVoice-BlankEN" / "config.json"))
    torch.save(llm.state_dict(), src / "llm.pt")
    del llm
    preset = "full" if size == "full" else "tiny"
    _reference.write_model_dir(src, flow=_reference.build_flow(preset), hift=_reference.build_hift(preset),
                               size=preset)
    emit({"stage": "prepare", "seconds": round(time.perf_counter() - t, 1), "peak_rss_mb": round(peak_rss_mb())})


def stage_convert(work: Path, llm_bits: int) -> None:
    from cosyedge.export.cosyvoice.v2.convert import convert
    from cosyedge.export.cosyvoice.common.llm import FP32, export_llm

    src = work / "src"
    t = time.perf_counter()
    convert(src, work / "int8", quantize="int8", steps=["flow", "hift", "llm", "compact"], force=True)
    t_int8 = time.perf_counter() - t
    if llm_bits == 4:
        convert(src, work / "int4", quantize="int8", steps=["flow", "hift", "llm", "compact"], force=True,
                options={"llm_bits": 4})
    from cosyedge.export.cosyvoice.common.llm import int8_speech_tokenizer, move_weights_to_external_data

    # The stand-ins are stored as the frontend step stores the real file (external data).
    standin = work / "speech_tokenizer_standin_fp32.onnx"
    speech_tokenizer_standin(standin)
    shutil.copyfile(standin, work / "speech_tokenizer_standin_int8.onnx")
    emit({"stage": "convert", "speech_tokenizer_standin_int8":
          int8_speech_tokenizer(work / "speech_tokenizer_standin_int8.onnx", frames=1000)})
    for precision in ("fp32", "int8"):
        move_weights_to_external_data(work / f"speech_tokenizer_standin_{precision}.onnx")
    t = time.perf_counter()
    export_llm(src / "llm.pt", src / "CosyVoice-BlankEN" / "config.json", work / "fp32", plan=FP32,
               text_embedding="float32")
    emit({"stage": "convert", "int8_all_seconds": round(t_int8, 1),
          "fp32_llm_seconds": round(time.perf_counter() - t, 1), "peak_rss_mb": round(peak_rss_mb())})


def _timed_generate(lm, data: dict, forced: list[int]) -> dict:
    """Prefill + len(forced) decode steps through SpeechLM.generate; returns timings."""
    it = iter(forced + [EOS])
    stamps: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    lm.generate(data["text"], lambda *_: next(it), data["prompt_text"], data["prompt_speech"],
                min_ratio=0, max_ratio=(len(forced) + 1.5) / len(data["text"]),
                on_step=lambda _: stamps.append((time.perf_counter(), time.process_time())))
    return _summary(t0, stamps)


def _summary(t0: float, stamps: list[tuple[float, float]]) -> dict:
    """Prefill wall time, decode wall ms/step and process CPU ms/step (all threads) from step stamps."""
    n = len(stamps) - 1
    return {"prefill_s": stamps[0][0] - t0, "decode_ms": (stamps[-1][0] - stamps[0][0]) / n * 1000,
            "decode_cpu_ms": (stamps[-1][1] - stamps[0][1]) / n * 1000}


def _timed_upstream(llm, data: dict, forced: list[int]) -> dict:
    import torch

    it = iter(forced + [EOS])
    stamps: list[tuple[float, float]] = []
    hook = llm.llm_decoder.register_forward_hook(
        lambda *_: stamps.append((time.perf_counter(), time.process_time())))
    llm.sampling_ids = lambda *a, **k: torch.tensor([next(it)])
    i32 = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    t0 = time.perf_counter()
    with torch.inference_mode():
        list(llm.inference(text=i32(data["text"]), text_len=torch.tensor([N_TEXT], dtype=torch.int32),
                           prompt_text=i32(data["prompt_text"]),
                           prompt_text_len=torch.tensor([N_PROMPT_TEXT], dtype=torch.int32),
                           prompt_speech_token=i32(data["prompt_speech"]),
                           prompt_speech_token_len=torch.tensor([N_PROMPT_SPEECH], dtype=torch.int32),
                           embedding=torch.zeros(0, 192), sampling=25,
                           max_token_text_ratio=(len(forced) + 1.5) / N_TEXT, min_token_text_ratio=0))
    hook.remove()
    del llm.sampling_ids
    return _summary(t0, stamps)


def stage_llm(work: Path, threads: int, rounds: int, size: str, steps: int) -> None:
    import torch

    from cosyedge.engines.cosyvoice.common.llm import SpeechLM

    torch.set_num_threads(threads)
    llm, _ = build_upstream_llm(size)
    llm.load_state_dict(torch.load(work / "src" / "llm.pt", map_location="cpu", weights_only=True))
    ours = {"onnx_fp32": SpeechLM.load(work / "fp32", threads), "onnx_int8": SpeechLM.load(work / "int8", threads)}
    data = inputs()
    # Quality: teacher-forced log-prob drift against upstream on the same prompt and tokens.
    steps_up: list[np.ndarray] = []
    hook = llm.llm_decoder.register_forward_hook(lambda m, i, o: steps_up.append(o.log_softmax(-1)[0].numpy()))
    _timed_upstream(llm, data, data["forced"][:40])
    hook.remove()
    fp32, int8 = ours["onnx_fp32"], ours["onnx_int8"]
    table_only = SpeechLM(fp32.session, fp32.config, int8.text_table, int8.text_scale, fp32.speech_embedding,
                          fp32.special_embedding)  # isolates the int8 text table's effect
    for name, lm in {**ours, "onnx_fp32_int8_text_table": table_only}.items():
        it = iter(data["forced"][:40] + [EOS])
        got: list[np.ndarray] = []
        lm.generate(data["text"], lambda *_: next(it), data["prompt_text"], data["prompt_speech"], min_ratio=0,
                    max_ratio=41.5 / N_TEXT, on_step=got.append)
        diffs = [np.abs(a - b) for a, b in zip(steps_up, got)]
        emit({"stage": "llm", "quality": name, "steps": len(got),
              "max_abs_logp_diff": float(max(d.max() for d in diffs)),
              "mean_abs_logp_diff": float(np.mean([d.mean() for d in diffs])),
              "argmax_agree": float(np.mean([int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(steps_up, got)])),
              "logp_spread": float(np.mean([a.max() - np.median(a) for a in steps_up]))})
    results: dict[str, list[dict]] = {"torch_upstream": [], "onnx_fp32": [], "onnx_int8": []}
    forced = data["forced"][:steps]
    for r in range(rounds + 1):  # round 0 is warm-up
        for name in results:
            t = _timed_upstream(llm, data, forced) if name == "torch_upstream" \
                else _timed_generate(ours[name], data, forced)
            if r:
                results[name].append(t)
            emit({"stage": "llm", "round": r, "runtime": name, **{k: round(v, 4) for k, v in t.items()}})
    summary = {}
    for name, runs in results.items():
        decode = float(np.median([x["decode_ms"] for x in runs]))
        summary[name] = {"prefill_s": round(float(np.median([x["prefill_s"] for x in runs])), 3),
                         "decode_ms": round(decode, 1), "tokens_per_s": round(1000 / decode, 2),
                         "decode_cpu_ms": round(float(np.median([x["decode_cpu_ms"] for x in runs])), 1)}
    emit({"stage": "llm", "summary": summary, "threads": threads, "rounds": rounds, "decode_steps": steps,
          "peak_rss_mb": round(peak_rss_mb())})


def stage_onnx(work: Path, threads: int, rounds: int, steps: int) -> None:
    """ONNX fp32 vs int8 decode only (no torch in the process): quick to repeat when the machine is quiet."""
    from cosyedge.engines.cosyvoice.common.llm import SpeechLM

    ours = {"onnx_fp32": SpeechLM.load(work / "fp32", threads), "onnx_int8": SpeechLM.load(work / "int8", threads)}
    if (work / "int4").is_dir():
        ours["onnx_int4"] = SpeechLM.load(work / "int4", threads)
    data = inputs()
    forced = data["forced"][:steps]
    results: dict[str, list[dict]] = {name: [] for name in ours}
    for r in range(rounds + 1):
        for name, lm in ours.items():
            t = _timed_generate(lm, data, forced)
            if r:
                results[name].append(t)
            emit({"stage": "onnx", "round": r, "runtime": name, "threads": threads,
                  **{k: round(v, 4) for k, v in t.items()}})
    summary = {name: {"decode_ms": round(float(np.median([x["decode_ms"] for x in runs])), 1),
                      "decode_cpu_ms": round(float(np.median([x["decode_cpu_ms"] for x in runs])), 1),
                      "tokens_per_s": round(1000 / float(np.median([x["decode_ms"] for x in runs])), 2),
                      "prefill_s": round(float(np.median([x["prefill_s"] for x in runs])), 3)}
               for name, runs in results.items()}
    emit({"stage": "onnx", "summary": summary, "threads": threads, "decode_steps": steps,
          "load": os.getloadavg()[0]})


def dir_mb(path: Path, prefix: str = "") -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name.startswith(prefix)) / 1e6


def memory_mb() -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak since the last :func:`reset_peak`) of this process, in MB."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5].lower()] = int(line.split()[1]) // 1024
    return out


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5), so the next reading is a stage's peak."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")


def speech_tokenizer_standin(path: Path, blocks: int = 9, width: int = 1280, seed: int = 0) -> None:
    """A random fp32 graph with ``speech_tokenizer_v2.onnx``'s signature and about its size (~0.5 GB).

    The real file (the user's download) is not available here; its memory is weight-dominated, so a
    stand-in of the same weight bytes (conv front, ``blocks`` residual MLPs, a 6561-way head, argmax)
    shows what loading it next to the LLM and flow costs. Not its compute or its accuracy.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((width, 128, 3)) * 0.05).astype(np.float32), "conv")]
    nodes = [helper.make_node("Conv", ["feats", "conv"], ["c"], strides=[4], pads=[1, 1]),
             helper.make_node("Transpose", ["c"], ["x0"], perm=[0, 2, 1])]
    x = "x0"
    for i in range(blocks):
        inits += [numpy_helper.from_array((rng.standard_normal((width, 4 * width)) * 0.02).astype(np.float32), f"w{i}a"),
                  numpy_helper.from_array((rng.standard_normal((4 * width, width)) * 0.02).astype(np.float32), f"w{i}b")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}a"], [f"h{i}"]), helper.make_node("Relu", [f"h{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", f"w{i}b"], [f"m{i}"]),
                  helper.make_node("Add", [x, f"m{i}"], [f"x{i + 1}"])]
        x = f"x{i + 1}"
    inits.append(numpy_helper.from_array((rng.standard_normal((width, 6561)) * 0.05).astype(np.float32), "head"))
    nodes += [helper.make_node("MatMul", [x, "head"], ["logits"]),
              helper.make_node("ArgMax", ["logits"], ["a"], axis=-1, keepdims=0),
              helper.make_node("Cast", ["a"], ["indices"], to=TensorProto.INT32),
              helper.make_node("Identity", ["feats_length"], ["length_out"])]
    graph = helper.make_graph(nodes, "speech_tokenizer_standin",
                              [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
                               helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
                              [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "N"]),
                               helper.make_tensor_value_info("length_out", TensorProto.INT32, [1])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def stage_e2e(work: Path, threads: int, model_dir: str, prompt_tokenizer: str) -> None:
    """Load, (prompt encode,) LLM, flow, HiFT in one process without torch; peak RSS per stage.

    ``prompt_tokenizer``: ``none``, or ``fp32`` / ``int8`` to run a speech-tokenizer stand-in of the real
    file's size on 10 s of prompt mel between the loads and the LLM, opened and released as the engine
    does for a new voice (so a "full clone request").
    """
    assert "torch" not in sys.modules
    from cosyedge.engines.cosyvoice.common.llm import SpeechLM
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir, open_session
    from cosyedge.host.heap import trim_heap
    from cosyedge.engines.cosyvoice.common.sampling import RasSampler
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav

    stages: dict[str, dict] = {}

    def stage(name: str, **extra) -> None:
        stages[name] = {**memory_mb(), **extra}
        reset_peak()

    directory = work / model_dir
    stage("start")
    t_load = time.perf_counter()
    model = ModelDir.load(directory)
    lm = SpeechLM.load(model.path, max(1, threads // 2))
    stage("load_llm")
    t2w = Token2Wav.load(model, threads=threads)
    trim_heap()  # as CosyVoiceEngine.load does
    t_load = time.perf_counter() - t_load
    stage("load_token2wav")
    data = inputs()
    rng = np.random.default_rng(1)
    prompt_mel = (rng.standard_normal((2 * N_PROMPT_SPEECH, 80)) - 5).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    sampler = RasSampler(eos=EOS, seed=0)

    def choose(logp, decoded, ignore_eos):  # real RAS sampling; end-of-speech and fill tokens masked
        logp = np.array(logp, copy=True)
        logp[EOS:] = -np.inf
        return sampler(logp, decoded, True)

    runs = []
    for r in range(2):
        if prompt_tokenizer != "none":
            c0 = time.process_time()
            lm.close()  # as CosyVoiceEngine.encode_prompt does: the LLM is not resident next to the tokenizer
            del lm
            trim_heap()
            session = open_session(work / f"speech_tokenizer_standin_{prompt_tokenizer}.onnx", threads,
                                   release_memory=True)
            session.run(None, {"feats": rng.standard_normal((1, 128, 1000)).astype(np.float32),
                               "feats_length": np.array([1000], np.int32)})
            del session
            trim_heap()  # as CosyVoiceEngine.encode_prompt does
            stage(f"prompt_encode_{r}", cpu_s=round(time.process_time() - c0, 2))
        c0 = time.process_time()
        t0 = time.perf_counter()
        if prompt_tokenizer != "none":  # reopened by the request's first sentence (counted in its LLM time)
            lm = SpeechLM.load(model.path, max(1, threads // 2))
        tokens = lm.generate(data["text"], choose, data["prompt_text"], data["prompt_speech"],
                             min_ratio=0, max_ratio=N_DECODE / N_TEXT)
        t1, c1 = time.perf_counter(), time.process_time()
        stage(f"llm_{r}", cpu_s=round(c1 - c0, 2))
        mel = t2w.mel(tokens, data["prompt_speech"], prompt_mel, embedding)
        t2, c2 = time.perf_counter(), time.process_time()
        stage(f"flow_{r}", cpu_s=round(c2 - c1, 2))
        audio = t2w.vocoder(mel, rng=rng)
        t3, c3 = time.perf_counter(), time.process_time()
        stage(f"hift_{r}", cpu_s=round(c3 - c2, 2))
        seconds = audio.size / t2w.sample_rate
        runs.append({"round": r, "tokens": len(tokens), "audio_s": round(seconds, 2), "llm_s": round(t1 - t0, 2),
                     "flow_s": round(t2 - t1, 2), "hift_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
                     "rtf": round((t3 - t0) / seconds, 3), "llm_cpu_s": round(c1 - c0, 2),
                     "llm_cpu_ms_per_token": round((c1 - c0) / max(1, len(tokens)) * 1000, 1),
                     "total_cpu_s": round(c3 - c0, 2), "cpu_rtf": round((c3 - c0) / seconds, 3),
                     "load": os.getloadavg()[0]})
        emit({"stage": "e2e", **runs[-1]})
    emit({"stage": "e2e", "model_dir": model_dir, "threads": threads, "load_s": round(t_load, 1),
          "prompt_tokenizer": prompt_tokenizer, "rss_by_stage_mb": stages,
          "peak_rss_mb": max(v["vmhwm"] for v in stages.values()), "best_rtf": min(x["rtf"] for x in runs),
          "disk_mb": {"dir_total": round(dir_mb(directory), 1), "llm_files": round(dir_mb(directory, "llm"), 1),
                      "by_file": {p.name: round(p.stat().st_size / 1e6, 1) for p in sorted(directory.iterdir())
                                  if p.is_file()}}})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("prepare", "convert", "llm", "onnx", "e2e", "all"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--steps", type=int, default=N_DECODE, help="decode steps timed in the llm stage")
    parser.add_argument("--llm-bits", type=int, choices=(4, 8), default=8,
                        help="convert: also write <work>/int4 with the 4-bit LLM when 4")
    parser.add_argument("--model-dir", default="int8", help="e2e: which converted directory under --work")
    parser.add_argument("--prompt-tokenizer", choices=("none", "fp32", "int8"), default="none",
                        help="e2e: run a speech-tokenizer stand-in of the real size first (a clone request)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "all":
        for stage in ("prepare", "convert", "llm", "e2e"):
            cmd = [sys.executable, __file__, stage, "--work", str(args.work), "--threads", str(args.threads),
                   "--rounds", str(args.rounds), "--size", args.size, "--steps", str(args.steps),
                   "--llm-bits", str(args.llm_bits), "--model-dir", args.model_dir,
                   "--prompt-tokenizer", args.prompt_tokenizer]
            if subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(ROOT))).returncode:
                return 1
        return 0
    if args.stage == "prepare":
        stage_prepare(args.work, args.size)
    elif args.stage == "convert":
        stage_convert(args.work, args.llm_bits)
    elif args.stage == "onnx":
        stage_onnx(args.work, args.threads, args.rounds, args.steps)
    elif args.stage == "llm":
        stage_llm(args.work, args.threads, args.rounds, args.size, args.steps)
    else:
        stage_e2e(args.work, args.threads, args.model_dir, args.prompt_tokenizer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
