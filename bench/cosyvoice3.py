#!/usr/bin/env python3
"""Fun-CosyVoice3 benchmark: full-size random weights, our ONNX int8 / fp32 against upstream PyTorch fp32.

    .venv-ref/bin/python bench/cosyvoice3.py prepare --upstream-src /path/to/CosyVoice --work /tmp/cv3
    .venv-ref/bin/python bench/cosyvoice3.py convert --work /tmp/cv3
    .venv-ref/bin/python bench/cosyvoice3.py compare --upstream-src /path/to/CosyVoice --work /tmp/cv3
    .venv/bin/python     bench/cosyvoice3.py engine --work /tmp/cv3        # peak RSS, no torch
    .venv/bin/python     bench/cosyvoice3.py stream --work /tmp/cv3 --tokens 260 --prompt-tokens 75
    (prepare/convert --flow-only: the flow and HiFT alone, int8, all the stream stage needs)

Stages (each its own process; run under ``flock /work/locks/heavy`` on a shared box):

* ``prepare``: upstream ``CosyVoice3LM`` (Qwen2.5-0.5B dims), ``CausalMaskedDiffWithDiT`` (DiT 1024 x 22,
  16 heads) and ``CausalHiFTGenerator`` (512 channels), random init (seed 0), saved in the official layout
  with a shrunken tokenizer and stand-in frontend graphs (tests/cosyvoice3/make_fixture.py builders).
* ``convert``: our converter, int8 (the default) and fp32.
* ``compare``: one process, ``--threads`` (2) for everything. The same prompt (sos + 30 text + task +
  ``--prompt-tokens`` speech) and the same forced tokens for all three LLMs (decode tokens/s, the LLM at
  the engine's own thread setting: half the threads); the DiT flow on ``--tokens`` target tokens with the
  prompt (seconds per audio second, int8 mel deviation against fp32 and upstream); the causal HiFT; the
  end-to-end RTF = (LLM + flow + HiFT) / audio seconds.
* ``stream``: streamed against whole token2wav side by side on the int8 model (or ``--model-dir``): the
  first hop's rendering time, each hop's, both RTFs (no torch).
* ``first-audio``: the engine (no torch) streaming one sentence of ``--tokens`` speech tokens (the
  LLM's length forced) with a cached voice, exact and live: first audio and RTF with the LLM in the loop.
* ``engine``: a torch-free process loading the int8 model as the app does and synthesizing one sentence
  of a clone request: its peak RSS; and the converted directories' sizes.

Results are JSON lines: record a run by hand as a round in docs/bench-log/cosyvoice3.md and update the
'Fun-CosyVoice3-0.5B' table of docs/benchmarks.md from it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import emit, loadavg, peak_rss_mb  # noqa: E402


def prepare(args) -> None:
    import torch

    from tests.cosyvoice3 import make_fixture as mf
    from tests.helpers.cosyvoice_tiny import campplus_standin, speech_tokenizer_standin
    from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

    mf.import_upstream(args.upstream_src)
    src = Path(args.work) / "Fun-CosyVoice3-0.5B"
    qwen = src / "CosyVoice-BlankEN"
    write_tiny_tokenizer(qwen)
    t0 = time.perf_counter()
    if not args.flow_only:
        llm = mf.build_llm(qwen, 0, qwen=mf.FULL_QWEN, tweak=False)
        torch.save(llm.state_dict(), src / "llm.pt")
        del llm
    flow = mf.build_flow(10, sizes=mf.FULL, tweak=False)
    torch.save(flow.state_dict(), src / "flow.pt")
    del flow
    hift = mf.build_hift(20, sizes=mf.FULL)
    torch.save(hift.state_dict(), src / "hift.pt")
    (src / "cosyvoice3.yaml").write_text(mf.yaml_text(mf.FULL, mf.FULL_QWEN), encoding="utf-8")
    campplus_standin(src / "campplus.onnx")
    speech_tokenizer_standin(src / "speech_tokenizer_v3.onnx")
    emit({"stage": "prepare", "seconds": round(time.perf_counter() - t0, 1), "peak_rss_mb": round(peak_rss_mb()),
          "bytes": {p.name: p.stat().st_size for p in src.iterdir() if p.is_file()}})


def convert(args) -> None:
    from cosyedge.export.cosyvoice.v3.convert import convert as run

    src = Path(args.work) / "Fun-CosyVoice3-0.5B"
    # fp32: the flow and HiFT only (the int8-vs-fp32 flow comparison); the LLM's fp32 graph is CosyVoice2's
    # own exporter with another weight plan, measured in bench/cosyvoice_llm.py.
    runs = (("int8", "cosyvoice3-int8", None), ("none", "cosyvoice3-fp32", ["flow", "hift"]))
    if args.flow_only:  # token2wav alone (the stream stage): int8 flow + HiFT
        runs = (("int8", "cosyvoice3-int8", ["flow", "hift"]),)
    for quantize, name, steps in runs:
        t0 = time.perf_counter()
        manifest = run(src, Path(args.work) / "models" / name, quantize=quantize, steps=steps, force=True)
        emit({"stage": "convert", "model": name, "seconds": round(time.perf_counter() - t0, 1),
              "bytes": sum(f["bytes"] for f in manifest["files"].values()),
              "graphs": {k: {kk: v.get(kk) for kk in ("precision", "snr_db_vs_fp32")} for k, v in manifest["graphs"].items()}})


def _timed(fn, repeat: int = 1):
    best, out = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, out


def compare(args) -> None:
    import torch

    from cosyedge.engines.cosyvoice.v3 import version as version3
    from cosyedge.engines.cosyvoice.common.llm import SpeechLM
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from tests.cosyvoice3 import make_fixture as mf

    torch.set_num_threads(args.threads)
    mf.import_upstream(args.upstream_src)
    from cosyvoice.flow.flow import CausalMaskedDiffWithDiT  # noqa: F401  (import check)

    work = Path(args.work)
    src = work / "Fun-CosyVoice3-0.5B"
    rng = np.random.default_rng(0)
    text = [151646] + rng.integers(0, 500, 29).tolist()
    prompt_speech = rng.integers(0, 6561, args.prompt_tokens).tolist()
    forced = rng.integers(0, 6561, args.decode).tolist()
    tokens = rng.integers(0, 6561, args.tokens)
    prompt_mel = (rng.standard_normal((2 * args.prompt_tokens, 80)) - 5).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    audio_s = args.tokens / 25.0
    record = {"stage": "compare", "threads": args.threads, "decode_tokens": args.decode, "target_tokens": args.tokens,
              "prompt_tokens": args.prompt_tokens, "audio_s": audio_s, "loadavg": loadavg()}

    # upstream PyTorch fp32
    llm = mf.build_llm(src / "CosyVoice-BlankEN", 0, qwen=mf.FULL_QWEN, tweak=False)
    llm.load_state_dict(torch.load(src / "llm.pt", map_location="cpu", weights_only=True))
    t_up, (_, up_logp) = _timed(lambda: mf.run_llm(llm, text, [], prompt_speech, forced=forced))
    record["upstream_llm_tok_s"] = round(args.decode / t_up, 2)
    del llm
    flow = mf.build_flow(10, sizes=mf.FULL, tweak=False)
    flow.load_state_dict(torch.load(src / "flow.pt", map_location="cpu", weights_only=True))
    i32 = lambda a: torch.tensor(np.asarray(a)[None], dtype=torch.int32)  # noqa: E731

    def up_flow():
        with torch.inference_mode():
            return flow.inference(token=i32(tokens), token_len=torch.tensor([len(tokens)], dtype=torch.int32),
                                  prompt_token=i32(prompt_speech), prompt_token_len=torch.tensor([len(prompt_speech)], dtype=torch.int32),
                                  prompt_feat=torch.from_numpy(prompt_mel)[None], prompt_feat_len=torch.tensor([len(prompt_mel)]),
                                  embedding=torch.from_numpy(embedding)[None], streaming=False, finalize=True)[0][0].numpy()
    t_flow_up, up_mel = _timed(up_flow)
    del flow
    hift = mf.build_hift(20, sizes=mf.FULL)
    hift.load_state_dict(torch.load(src / "hift.pt", map_location="cpu", weights_only=True))
    noise = mf.hift_noise(up_mel.shape[1] * 480)
    hift.m_source.l_sin_gen.sine_waves = torch.from_numpy(noise)[None]
    with torch.inference_mode():
        t_hift_up, up_audio = _timed(lambda: hift.inference(speech_feat=torch.from_numpy(up_mel)[None])[0][0].numpy())
    del hift
    record.update(upstream_flow_s_per_audio_s=round(t_flow_up / audio_s, 2),
                  upstream_hift_s_per_audio_s=round(t_hift_up / audio_s, 3),
                  upstream_rtf=round((args.decode / record["upstream_llm_tok_s"] * args.tokens / args.decode
                                      + t_flow_up + t_hift_up) / audio_s, 2))

    for name in ("cosyvoice3-int8", "cosyvoice3-fp32"):
        model = ModelDir.load(work / "models" / name)
        key = name.split("-")[1]
        if (model.path / "llm_config.json").is_file():
            lm = SpeechLM.load(model.path, threads=max(1, args.threads // 2))
            embeds = lm.build_prompt(text, [], prompt_speech)

            def decode():
                cache = lm.empty_cache()
                logp, cache = lm.step(embeds, cache)
                out = [logp]
                for tok in forced[:-1]:
                    logp, cache = lm.step(lm.embed_speech([tok]), cache)
                    out.append(logp)
                return np.stack(out)
            t_lm, logp = _timed(decode)
            record[f"{key}_llm_tok_s"] = round(args.decode / t_lm, 2)
            record[f"{key}_llm_logp_max_dev"] = float(np.abs(logp - up_logp[:len(logp)]).max())
            lm.close()
        t2w = version3.load_token2wav(model, threads=args.threads)
        t_flow, mel = _timed(lambda: t2w.mel(tokens, np.asarray(prompt_speech), prompt_mel, embedding))
        t_hift, audio = _timed(lambda: t2w.vocoder(mel, noise=noise))
        record[f"{key}_flow_s_per_audio_s"] = round(t_flow / audio_s, 2)
        record[f"{key}_hift_s_per_audio_s"] = round(t_hift / audio_s, 3)
        record[f"{key}_mel_max_dev_vs_upstream"] = float(np.abs(mel - up_mel).max())
        record[f"{key}_mel_snr_db_vs_upstream"] = round(float(10 * np.log10(np.sum(up_mel ** 2) / np.sum((mel - up_mel) ** 2))), 1)
        record[f"{key}_audio_max_dev_vs_upstream(mel of each)"] = float(np.abs(audio - up_audio).max()) \
            if audio.shape == up_audio.shape else None
        tok_s = record.get(f"{key}_llm_tok_s", record.get("int8_llm_tok_s"))
        record[f"{key}_rtf"] = round((args.tokens / tok_s + t_flow + t_hift) / audio_s, 2)
        del t2w
    record["peak_rss_mb_compare_process"] = round(peak_rss_mb())
    emit(record)


def engine(args) -> None:
    """Peak RSS of a clone request on the int8 model, loaded as the app loads it (no torch)."""
    from cosyedge.service import synthesis
    from cosyedge.config import Settings
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.loader import load_engine

    work = Path(args.work)
    t0 = time.perf_counter()
    eng = load_engine(Settings(models_dir=work / "models", model="cosyvoice3-int8", onnx_threads=args.threads))
    load_s = time.perf_counter() - t0
    t = np.arange(5 * 16000) / 16000
    voice = eng.encode_prompt((0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 16000, "hello world")
    t0 = time.perf_counter()
    result = synthesis.synthesize(eng, "Hello world, this is one sentence for the benchmark.", voice,
                                  SynthesisOptions(seed=1), max_chars=5000)
    sizes = {}
    for name in ("cosyvoice3-int8", "cosyvoice3-fp32"):
        d = work / "models" / name
        sizes[name] = sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) if d.is_dir() else None
    emit({"stage": "engine", "threads": args.threads, "load_s": round(load_s, 1),
          "synth_s": round(time.perf_counter() - t0, 1), "audio_s": round(result.duration, 2),
          "peak_rss_mb": round(peak_rss_mb()), "dir_bytes": sizes})


def stream(args) -> None:
    """Streamed against whole token2wav, side by side in one process, on a converted model (no torch).

    ``--tokens`` target tokens after ``--prompt-tokens`` prompt tokens (random ids, random prompt mel),
    as the LLM would hand them over all at once: streamed, each hop's rendering time (DiT chunks +
    causal HiFT) and the first hop's, for a voice's first sentence and for its next (the prompt's
    text-independent chunks kept); whole, ``token2wav`` of the same tokens. RTF = seconds / audio
    seconds. A warm-up of each path runs first."""
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from cosyedge.engines.cosyvoice.v3 import version as version3

    model_dir = args.model_dir or Path(args.work) / "models" / "cosyvoice3-int8"
    t2w = version3.load_token2wav(ModelDir.load(model_dir), threads=args.threads)
    if not t2w.can_stream:
        raise SystemExit(f"{model_dir} has no DiT chunk-step graph: convert it again")
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 6561, args.prompt_tokens)
    prompt_mel = (rng.standard_normal((2 * args.prompt_tokens, 80)) - 4).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    tokens = rng.integers(0, 6561, args.tokens)

    def streamed(new_voice: bool = True) -> tuple[list[float], float, int]:
        if new_voice:  # a voice's first sentence: its prompt chunks are rendered too
            t2w.prompt_states.clear()
        s = t2w.stream(prompt, prompt_mel, embedding, expected_tokens=len(tokens))
        hops, samples, t0 = [], 0, time.perf_counter()
        for token in tokens:
            for audio in s.push([token]):
                hops.append(time.perf_counter() - t0)
                samples += audio.shape[0]
        samples += s.finish().shape[0]
        hops.append(time.perf_counter() - t0)
        return hops, hops[-1], samples

    def whole() -> tuple[float, int]:
        t0 = time.perf_counter()
        audio = t2w(tokens, prompt, prompt_mel, embedding)
        return time.perf_counter() - t0, audio.shape[0]

    streamed(), whole()  # warm-up
    hops, stream_s, stream_samples = streamed()
    next_hops, next_s, _ = streamed(new_voice=False)  # the voice's next sentence: prompt chunks kept
    whole_s, whole_samples = whole()
    audio_s = whole_samples / t2w.sample_rate
    emit({"stage": "stream", "model": str(model_dir), "threads": args.threads, "tokens": args.tokens,
          "prompt_tokens": args.prompt_tokens, "audio_s": round(audio_s, 2),
          "samples_equal": stream_samples == whole_samples, "first_hop_s": round(hops[0], 3),
          "hop_done_s": [round(h, 2) for h in hops], "stream_rtf": round(stream_s / audio_s, 3),
          "whole_rtf": round(whole_s / audio_s, 3), "stream_over_whole": round(stream_s / whole_s, 2),
          "next_sentence_first_hop_s": round(next_hops[0], 3), "next_sentence_rtf": round(next_s / audio_s, 3),
          "load": loadavg(), "peak_rss_mb": round(peak_rss_mb())})


def first_audio(args) -> None:
    """Streamed first audio and RTF with the LLM in the loop, in the engine (no torch), per quality mode.

    The random LLM would stop at any length, so its sampler is made to draw ``--tokens`` speech tokens
    (stop ids masked, upstream's nucleus otherwise) and then stop: every mode renders the same length.
    A cached voice (encoded once, then a warm-up sentence), then per mode: the seconds to the first
    streamed chunk and to the end, the audio seconds and the RTF, at ``--threads``."""
    from cosyedge.config import Settings
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.cosyvoice.common import engine as common_engine
    from cosyedge.engines.cosyvoice.common.sampling import RasSampler
    from cosyedge.engines.loader import load_engine

    length = args.tokens

    class ForcedLength(RasSampler):
        def __call__(self, logp, decoded, ignore_eos):  # noqa: ANN001, ANN204
            if len(decoded) >= length:
                return self.eos
            probs = np.exp(logp - np.max(logp))
            probs[self.eos:] = 0.0  # every id from the masked one up is a stop in CosyVoice3
            return self.draw(probs / probs.sum(), decoded)

    common_engine.RasSampler = ForcedLength
    model_dir = args.model_dir or Path(args.work) / "models" / "cosyvoice3-int8"
    eng = load_engine(Settings(models_dir=model_dir.parent, model=model_dir.name, onnx_threads=args.threads))
    t = np.arange(3 * 16000) / 16000
    voice = eng.encode_prompt((0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 16000, "hello world")
    text = "Hello world, the quick brown fox jumps over the lazy dog."
    for quality in ("exact", "exact", "live"):  # the first exact is the voice's first sentence
        started, first, samples = time.perf_counter(), None, 0
        for chunk in eng.synthesize(text, voice, SynthesisOptions(seed=1, stream=True, quality=quality)):
            first = first if first is not None else time.perf_counter() - started
            samples += chunk.audio.size
        total = time.perf_counter() - started
        audio_s = samples / eng.capabilities.sample_rate
        emit({"stage": "first-audio", "quality": quality, "threads": args.threads, "tokens": length,
              "first_audio_s": round(first, 2), "total_s": round(total, 2), "audio_s": round(audio_s, 2),
              "rtf": round(total / audio_s, 3), "load": loadavg(), "peak_rss_mb": round(peak_rss_mb())})
    eng.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("prepare", "convert", "compare", "engine", "stream", "first-audio"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/cv3bench"))
    parser.add_argument("--upstream-src", type=Path, default=Path(os.environ.get("COSYVOICE_SRC", "")))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode", type=int, default=50, help="forced LLM decode steps")
    parser.add_argument("--tokens", type=int, default=50, help="target speech tokens for the flow (25 per s)")
    parser.add_argument("--prompt-tokens", type=int, default=50)
    parser.add_argument("--flow-only", action="store_true",
                        help="prepare/convert: the flow and HiFT only (no LLM), int8: what the stream stage needs")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="stream: a converted v3 model (default: WORK/models/cosyvoice3-int8)")
    args = parser.parse_args()
    {"prepare": prepare, "convert": convert, "compare": compare, "engine": engine, "stream": stream,
     "first-audio": first_audio}[args.stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
