#!/usr/bin/env python3
"""How far each CosyVoice ``quality`` mode's output is from exact's, and the LLM's own decode rate.

    .venv/bin/python bench/cosyvoice_quality.py deviation --model-dir test-artifacts/tiny-models/models/cosyvoice2-tiny
    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/cosyvoice_quality.py deviation \\
        --model-dir W/models/cosyvoice2-bench --json W/deviation.json
    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/cosyvoice_quality.py llm \\
        --model-dir W/models/cosyvoice2-bench --threads 1

Stages (the app's venv, no torch; the full-size model is ``bench/cosyvoice_first_audio.py prepare``'s):

* ``deviation``: the engine in this process on a converted CosyVoice2 model, one voice (a synthetic
  recording with its transcript: zero-shot), one text, one seed. Each mode renders the text whole and
  streamed; spies keep the speech tokens the LLM made and the mel the vocoder got (a streamed answer's
  hops joined). Reported per mode and path against exact's same path: token agreement (the share of
  positions with the same token; the levers all act after the LLM, so anything but 100 % is a bug) and
  the mel's SNR (dB; ``inf`` = identical). Then the same mel SNR for fixed random tokens of
  ``--seconds`` after a 3 s prompt (token2wav alone: a sentence as long as asked, whatever the LLM of
  a tiny model would make), whole and streamed. Random weights cannot say how a mode sounds: these figures
  say how far it moves the numbers, not whether that is heard (issue 32's check judges that on the
  user's model).
* ``llm``: the LLM alone decoding the first-audio bench's 10.4 s sentence with a voice prompt at
  ``--threads``: its seconds per audio second, the pace a live answer cannot beat (the live RTF goal
  is at most 1.15x this).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import emit, loadavg, machine_info, report  # noqa: E402

TEXT = "Hello world, the quick brown fox jumps over the lazy dog."   # 13 tiny-tokenizer tokens: 10.4 s at full size
TRANSCRIPT = "Read this slowly and warmly, please."
TOKENS_PER_SECOND = 25


def _voice(engine, seconds: float = 3.2, sr: int = 16000):
    """A voiced synthetic recording (harmonics of 140 Hz, a slow vibrato) encoded with its transcript."""
    t = np.arange(int(sr * seconds)) / sr
    phase = 2 * np.pi * np.cumsum(140 + 8 * np.sin(2 * np.pi * 3 * t)) / sr
    audio = sum(0.2 / k * np.sin(k * phase) for k in range(1, 6)).astype(np.float32)
    return engine.encode_prompt(audio, sr, TRANSCRIPT)


class Capture:
    """Spies on the LLM (its tokens) and the vocoder (the mel it is given), class-wide."""

    def __init__(self) -> None:
        from cosyedge.engines.cosyvoice.common.hift import HiftStream, HiftVocoder
        from cosyedge.engines.cosyvoice.common.llm import SpeechLM

        self.tokens: list[int] = []
        self.mels: list[np.ndarray] = []
        capture = self
        iter_tokens = SpeechLM.iter_tokens  # generate reads it too
        vocode, push = HiftVocoder.__call__, HiftStream.push

        def spy_iter(lm, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            for token in iter_tokens(lm, *args, **kwargs):
                capture.tokens.append(int(token))
                yield token

        def spy_vocode(vocoder, mel, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            capture.mels.append(np.asarray(mel, dtype=np.float32).copy())
            return vocode(vocoder, mel, *args, **kwargs)

        def spy_push(stream, mel, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            capture.mels.append(np.asarray(mel, dtype=np.float32).copy())
            return push(stream, mel, *args, **kwargs)

        SpeechLM.iter_tokens = spy_iter
        HiftVocoder.__call__, HiftStream.push = spy_vocode, spy_push

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        tokens, mel = np.asarray(self.tokens), np.concatenate(self.mels, axis=1)
        self.tokens, self.mels = [], []
        return tokens, mel


def stage_deviation(model_dir: Path, threads: int, text: str, seed: int, sentence_s: float,
                    each_lever: bool = False) -> dict:
    from cosyedge.config import Settings
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.cosyvoice.common.quality import QUALITY_NAMES
    from cosyedge.engines.loader import load_engine
    from cosyedge.export.cosyvoice.common.quantize import snr_db

    engine = load_engine(Settings(models_dir=model_dir.parent, model=model_dir.name, onnx_threads=threads,
                                  thread_calibration=False))
    voice = _voice(engine)
    capture = Capture()
    out: dict = {"stage": "deviation", "machine": machine_info(), "model": model_dir.name, "threads": threads,
                 "text": text, "seed": seed, "loadavg_before": loadavg(), "runs": []}
    reference: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
    for quality in QUALITY_NAMES:  # exact first: the reference of each path
        levers = engine.quality_levers(quality)
        for stream in (False, True):
            engine.token2wav.flow.prompt_states.clear()
            t0 = time.perf_counter()
            chunks = list(engine.synthesize(text, voice, SynthesisOptions(seed=seed, stream=stream, quality=quality)))
            seconds = time.perf_counter() - t0
            tokens, mel = capture.take()
            ref_tokens, ref_mel = reference.setdefault(stream, (tokens, mel))
            n = max(len(tokens), len(ref_tokens))
            agree = float(np.mean(np.pad(tokens, (0, n - len(tokens)), constant_values=-1)
                                  == np.pad(ref_tokens, (0, n - len(ref_tokens)), constant_values=-2)))
            frames = min(mel.shape[1], ref_mel.shape[1])
            run = {"quality": quality, "streamed": stream, "levers": levers.describe(), "tokens": len(tokens),
                   "token_agreement": round(agree, 4), "mel_frames": int(mel.shape[1]),
                   "mel_snr_db": round(snr_db(ref_mel[:, :frames], mel[:, :frames]), 2),
                   "audio_s": round(sum(c.audio.size for c in chunks) / engine.capabilities.sample_rate, 2),
                   "seconds": round(seconds, 2)}
            emit(run)
            out["runs"].append(run)
    exact_whole, exact_stream = reference[False][1], reference[True][1]
    frames = min(exact_whole.shape[1], exact_stream.shape[1])
    out["exact_streamed_vs_whole_mel_snr_db"] = round(snr_db(exact_whole[:, :frames], exact_stream[:, :frames]), 2)
    out["token2wav"] = _token2wav_deviation(engine, capture, sentence_s, snr_db, each_lever)
    out["loadavg_after"] = loadavg()
    engine.close()
    return out


def _token2wav_deviation(engine, capture: Capture, seconds: float, snr_db, each_lever: bool) -> list[dict]:  # noqa: ANN001
    """Each mode's mel against exact's for fixed random tokens of ``seconds`` (any length, whatever the
    LLM would make) after a 3 s prompt: whole, and streamed 5 tokens at a time; with ``each_lever``
    also each lever of the modes on its own."""
    rng = np.random.default_rng(0)
    n, p = int(seconds * TOKENS_PER_SECOND), 75
    tokens, prompt = rng.integers(0, 6561, n), rng.integers(0, 6561, p)
    prompt_mel, embedding = rng.standard_normal((2 * p, 80)).astype(np.float32) - 4, rng.standard_normal(192)
    from cosyedge.engines.cosyvoice.common.quality import Levers

    t2w, runs, reference = engine.token2wav, [], {}
    settings = [(quality, engine.quality_levers(quality)) for quality in engine.capabilities.quality_modes]
    if each_lever:
        settings += [(name, levers) for name, levers in (
            ("6 steps", Levers(flow_steps=6)), ("4 steps", Levers(flow_steps=4)), ("CFG first 2", Levers(cfg_steps=2)),
            ("no CFG", Levers(cfg_steps=0)), ("left 6 chunks", Levers(left_chunks=6)),
            ("left 4 chunks", Levers(left_chunks=4)), ("first hop 10", Levers(first_hop_tokens=10)))]
    for quality, levers in settings:
        for stream in (False, True):
            t2w.flow.prompt_states.clear()
            if stream:
                renderer = t2w.stream(prompt, prompt_mel, embedding, n_timesteps=levers.flow_steps,
                                      rng=np.random.default_rng(1), cfg_steps=levers.cfg_steps,
                                      left_chunks=levers.left_chunks, first_hop_tokens=levers.first_hop_tokens)
                for i in range(0, n, 5):
                    renderer.push(tokens[i:i + 5])
                renderer.finish()
            else:
                t2w(tokens, prompt, prompt_mel, embedding, n_timesteps=levers.flow_steps, cfg_steps=levers.cfg_steps,
                    rng=np.random.default_rng(1))
            _, mel = capture.take()
            ref = reference.setdefault(stream, mel)
            run = {"quality": quality, "streamed": stream, "audio_s": seconds,
                   "mel_snr_db": round(snr_db(ref, mel), 2) if ref.shape == mel.shape else None}
            emit(run)
            runs.append(run)
    return runs


def stage_llm(model_dir: Path, threads: int, text: str, seed: int, rounds: int) -> dict:
    from cosyedge.config import Settings
    from cosyedge.engines.cosyvoice.common.llm import SpeechLM
    from cosyedge.engines.cosyvoice.common.sampling import RasSampler
    from cosyedge.engines.loader import load_engine

    engine = load_engine(Settings(models_dir=model_dir.parent, model=model_dir.name, onnx_threads=2,
                                  thread_calibration=False))
    voice = _voice(engine)
    text_ids = engine.tokenizer.encode(text)
    prompt_text = engine.tokenizer.encode(engine.described.zero_shot_prompt(voice.meta["transcript"]))
    prompt_speech = voice.arrays["tokens"].tolist()
    engine.close()
    lm = SpeechLM.load(model_dir, threads=threads)
    out: dict = {"stage": "llm", "machine": machine_info(), "model": model_dir.name, "threads": threads,
                 "loadavg_before": loadavg(), "runs": []}
    for r in range(rounds + 1):  # the first round warms the session
        chooser = RasSampler(eos=lm.config.masked_id, seed=seed)
        t0, c0 = time.perf_counter(), time.process_time()
        first = None
        count = 0
        for _ in lm.iter_tokens(text_ids, chooser, prompt_text, prompt_speech):
            count += 1
            if first is None:
                first = time.perf_counter() - t0
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if r == 0:
            continue
        audio_s = count / TOKENS_PER_SECOND
        run = {"tokens": count, "audio_s": audio_s, "first_token_s": round(first, 3), "seconds": round(wall, 3),
               "decode_s_per_audio_s": round((wall - first) / max(audio_s - 1 / TOKENS_PER_SECOND, 1e-9), 3),
               "s_per_audio_s": round(wall / audio_s, 3), "cpu_s": round(cpu, 2), "loadavg": loadavg()}
        emit(run)
        out["runs"].append(run)
    lm.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("deviation", "llm"))
    parser.add_argument("--model-dir", type=Path, required=True, help="a converted CosyVoice2 model folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2, help="llm: timed decodes")
    parser.add_argument("--seconds", type=float, default=10.4,
                        help="deviation: the length of the random-token sentence rendered in every mode")
    parser.add_argument("--each-lever", action="store_true",
                        help="deviation: also each lever of the modes on its own (token2wav part)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model_dir = args.model_dir.resolve()
    if args.stage == "deviation":
        result = stage_deviation(model_dir, args.threads, args.text, args.seed, args.seconds, args.each_lever)
    else:
        result = stage_llm(model_dir, args.threads, args.text, args.seed, args.rounds)
    return report(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
