"""Full-size CosyVoice2 flow + HiFT: parity against upstream and speed, fp32 / int8 / upstream PyTorch.

Builds the upstream modules at CosyVoice2-0.5B size with random weights, saves them in the official
layout, converts them with our CLI code (fp32 and int8), checks the same stages as the CI parity tests,
then times flow and HiFT per second of audio on N threads, interleaving upstream PyTorch, our fp32 and
our int8 runs in one process so the ratios survive machine load.

    .venv/bin/python bench/cosyvoice_flow_hift.py --threads 2 --reps 3 --json /tmp/cv2_bench.json

Needs the reference stack (scripts/install_reference.sh .venv); about 3 GB RAM and a few minutes.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_model, load_average  # noqa: E402

logger = logging.getLogger("bench.cosyvoice_flow_hift")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=250, help="target tokens (250 = 10 s of audio)")
    parser.add_argument("--prompt-tokens", type=int, default=75, help="prompt tokens (75 = 3 s)")
    parser.add_argument("--size", choices=("full", "tiny"), default="full", help="tiny: smoke test only")
    parser.add_argument("--workdir", type=Path, default=None, help="where checkpoints/models go (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--steps-sweep", default="", help="also time int8 flow at these Euler step counts, e.g. 4,6")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from tests.helpers import cosyvoice_reference as ref
    ref.install_shim()
    import torch
    torch.set_num_threads(args.threads)

    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
    from cosyedge.export.cosyvoice.v2.convert import convert
    from cosyedge.export.cosyvoice.common.quantize import snr_db

    result: dict = {"size": args.size, "machine": cpu_model(), "threads": args.threads,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_average(),
                    "torch": torch.__version__}
    import onnxruntime
    result["onnxruntime"] = onnxruntime.__version__

    work = args.workdir or Path(tempfile.mkdtemp(prefix="cv2_full_"))
    logger.info("building full-size upstream flow + HiFT (random weights) in %s", work)
    flow, hift = ref.build_flow(args.size, seed=0), ref.build_hift(args.size, seed=0)
    src = ref.write_model_dir(work / "src", flow, hift, size=args.size)
    timings_convert = {}
    for quant in ("none", "int8"):
        t0 = time.perf_counter()
        manifest = convert(src, work / quant, quantize=quant, steps=["flow", "hift"], force=True)
        timings_convert[quant] = round(time.perf_counter() - t0, 1)
        result[f"files_{quant}"] = {k: v["bytes"] for k, v in manifest["files"].items()}
        result[f"graphs_{quant}"] = manifest["graphs"]
    result["convert_seconds"] = timings_convert
    runtimes = {q: Token2Wav.load(work / q, threads=args.threads) for q in ("none", "int8")}

    # ---------------- parity (same checks as the CI tests, at full size) ----------------
    gen = torch.Generator().manual_seed(7)
    n_tok, n_prompt = args.tokens, args.prompt_tokens
    tokens = torch.randint(0, 6561, (1, n_tok), generator=gen)
    ptokens = torch.randint(0, 6561, (1, n_prompt), generator=gen)
    pfeat = torch.randn(1, 2 * n_prompt, 80, generator=gen) * 2 - 4
    emb = torch.randn(1, 192, generator=gen)
    i32 = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    np_in = (tokens[0].numpy(), ptokens[0].numpy(), pfeat[0].numpy(), emb[0].numpy())
    parity = {}
    with torch.no_grad():
        allt = torch.cat([ptokens, tokens], 1)
        h, _ = flow.encoder(flow.input_embedding(allt), i32(allt.shape[1]))
        mu_ref = flow.encoder_proj(h).transpose(1, 2)[0].numpy()
    mu, _ = runtimes["none"].flow.encode(allt[0].numpy(), emb[0].numpy())
    parity["encoder_mu_max_abs"] = float(np.abs(mu - mu_ref).max())
    n_frames = 2 * (n_tok + n_prompt)
    x, m, c = (torch.randn(2, 80, n_frames, generator=gen) for _ in range(3))
    mask, tt, spks = torch.ones(2, 1, n_frames), torch.rand(2, generator=gen), torch.randn(2, 80, generator=gen)
    with torch.no_grad():
        est_ref = flow.decoder.estimator(x, mask, m, tt, spks, c).numpy()
    est = runtimes["none"].flow.estimate(x.numpy(), m.numpy(), tt.numpy(), spks.numpy(), c.numpy())
    parity["estimator_max_abs"] = float(np.abs(est - est_ref).max())
    parity["estimator_ref_max"] = float(np.abs(est_ref).max())

    def upstream_flow(tok, ptok, feat):
        with torch.no_grad():
            mel, _ = flow.inference(token=tok, token_len=i32(tok.shape[1]), prompt_token=ptok,
                                    prompt_token_len=i32(ptok.shape[1]), prompt_feat=feat,
                                    prompt_feat_len=i32(feat.shape[1]), embedding=emb, streaming=False,
                                    finalize=True)
        return mel[0].numpy()

    # ---------------- speed: interleaved, same process ----------------
    # Warm-up on a short input (first-call allocations), then timed reps on the full input. The first
    # timed rep's outputs also serve the parity checks, so the slow upstream flow runs only `reps` times.
    audio_s = 2 * n_tok * 480 / 24000
    rng = np.random.default_rng(0)
    short = (tokens[:, :25], ptokens[:, :8], pfeat[:, :16])
    short_np = tuple(a[0].numpy() for a in short) + (emb[0].numpy(),)
    warm_mel = upstream_flow(*short)
    with torch.no_grad():
        hift.inference(speech_feat=torch.from_numpy(warm_mel)[None])
    for q in ("none", "int8"):
        runtimes[q](*short_np, rng=rng)
    outputs: dict[str, np.ndarray] = {}
    runs: dict[str, list[float]] = {k: [] for k in (
        "flow_upstream", "flow_fp32", "flow_int8", "hift_upstream", "hift_fp32", "hift_int8")}
    cpu_runs: dict[str, list[float]] = {k: [] for k in runs}  # process CPU time: robust to other load
    for rep in range(args.reps):
        for name, fn in (
            ("flow_upstream", lambda: upstream_flow(tokens, ptokens, pfeat)),
            ("flow_fp32", lambda: runtimes["none"].mel(*np_in)),
            ("flow_int8", lambda: runtimes["int8"].mel(*np_in)),
            ("hift_upstream", lambda: hift.inference(speech_feat=torch.from_numpy(outputs["flow_upstream"])[None])),
            ("hift_fp32", lambda: runtimes["none"].vocoder(outputs["flow_upstream"], rng=rng)),
            ("hift_int8", lambda: runtimes["int8"].vocoder(outputs["flow_upstream"], rng=rng)),
        ):
            with torch.no_grad():
                t0, c0 = time.perf_counter(), time.process_time()
                out = fn()
                runs[name].append(time.perf_counter() - t0)
                cpu_runs[name].append(time.process_time() - c0)
            if rep == 0:
                outputs[name] = out
            logger.info("rep %d %s %.2f s, CPU %.2f s (load %s)", rep, name, runs[name][-1], cpu_runs[name][-1],
                        load_average())

    sweep = {}
    for steps in [int(s) for s in args.steps_sweep.split(",") if s.strip()]:
        t0, c0 = time.perf_counter(), time.process_time()
        mel_s = runtimes["int8"].mel(*np_in, n_timesteps=steps)
        sweep[steps] = {"s_per_audio_s": round((time.perf_counter() - t0) / audio_s, 4),
                        "cpu_s_per_audio_s": round((time.process_time() - c0) / audio_s, 4),
                        "mel_snr_db_vs_10_steps_int8": round(snr_db(outputs["flow_int8"], mel_s), 2)}
        logger.info("int8 flow, %d steps: %s", steps, sweep[steps])
    if sweep:
        result["int8_flow_steps_sweep"] = sweep

    mel_ref, mel32, mel8 = outputs["flow_upstream"], outputs["flow_fp32"], outputs["flow_int8"]
    parity["cfm_mel_max_abs"] = float(np.abs(mel32 - mel_ref).max())
    parity["mel_ref_range"] = [float(mel_ref.min()), float(mel_ref.max())]
    parity["int8_mel_snr_db"] = round(snr_db(mel32, mel8), 2)

    hmel = mel_ref  # vocode the upstream mel
    cache = 0.1 * torch.randn(1, 1, hmel.shape[1] * 480, generator=gen)
    with torch.no_grad():
        wav_ref, _ = hift.inference(speech_feat=torch.from_numpy(hmel)[None], cache_source=cache)
        f0_ref = hift.f0_predictor(torch.from_numpy(hmel)[None])[0].numpy()
    wav32 = runtimes["none"].vocoder.decode(hmel, cache[0, 0].numpy())
    wav8 = runtimes["int8"].vocoder.decode(hmel, cache[0, 0].numpy())
    parity["hift_wav_max_abs"] = float(np.abs(wav32 - wav_ref[0].numpy()).max())
    parity["hift_wav_ref_peak"] = float(np.abs(wav_ref).max())
    parity["f0_max_abs_hz"] = float(np.abs(runtimes["none"].vocoder.f0(hmel) - f0_ref).max())
    parity["int8_wav_snr_db"] = round(snr_db(wav32, wav8), 2)
    noise = np.random.default_rng(0).standard_normal((hmel.shape[1] * 480, 9), dtype=np.float32)
    parity["int8_end_to_end_wav_snr_db"] = round(snr_db(runtimes["none"].vocoder(mel32, noise=noise),
                                                        runtimes["int8"].vocoder(mel8, noise=noise)), 2)
    parity["pass"] = bool(parity["encoder_mu_max_abs"] < 1e-3 and parity["estimator_max_abs"] < 1e-3
                          and parity["cfm_mel_max_abs"] < 1e-2 and parity["hift_wav_max_abs"] < 1e-3)
    result["parity"] = parity
    logger.info("parity: %s", parity)

    per_s = {k: round(statistics.median(v) / audio_s, 4) for k, v in runs.items()}
    result["audio_seconds"] = audio_s
    result["seconds_per_audio_second"] = per_s
    result["runs"] = {k: [round(x, 3) for x in v] for k, v in runs.items()}
    cpu_per_s = {k: round(statistics.median(v) / audio_s, 4) for k, v in cpu_runs.items()}
    result["cpu_seconds_per_audio_second"] = cpu_per_s
    for q in ("fp32", "int8"):
        total = per_s[f"flow_{q}"] + per_s[f"hift_{q}"]
        result[f"flow_hift_{q}_s_per_audio_s"] = round(total, 4)
        result[f"speedup_{q}_vs_upstream"] = round((per_s["flow_upstream"] + per_s["hift_upstream"]) / total, 2)
        cpu_total = cpu_per_s[f"flow_{q}"] + cpu_per_s[f"hift_{q}"]
        result[f"cpu_speedup_{q}_vs_upstream"] = round(
            (cpu_per_s["flow_upstream"] + cpu_per_s["hift_upstream"]) / cpu_total, 2)
    result["load_after"] = load_average()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
