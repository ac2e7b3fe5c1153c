"""Streamed vs non-streamed CosyVoice2 token2wav at full size (random weights), beside upstream PyTorch.

Builds the upstream flow + HiFT at CosyVoice2-0.5B size, converts them (int8, as shipped), then, in one
process so the ratios survive machine load:

* ours, non-streamed: ``Token2Wav(tokens)`` (flow then HiFT over the whole sentence);
* ours, streamed: ``Token2Wav.stream`` fed 25 tokens at a time as fast as it takes them (the tokens'
  arrival is the LLM's part; this times the rendering): the prompt's own chunks (rendered while the
  LLM starts), then the time to the first hop's audio, total, flow work per audio second;
* upstream PyTorch at 46dfe04, streamed (each hop calls ``flow.inference(all tokens so far,
  streaming=True)``) and non-streamed, at 10 s only (the streamed one recomputes every prefix).

Peak RSS of the streamed and non-streamed runs is measured in child processes that import no torch
(the app's situation): ``VmHWM`` after one sentence.

    flock /work/locks/heavy .venv-ref/bin/python bench/cosyvoice_stream.py --threads 2 --json /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import cpu_flags, cpu_model, load_average  # noqa: E402

_CHILD = r"""
import json, sys, time, numpy as np
from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
model, mode, n, p, steps, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
t2w = Token2Wav.load(model, threads=threads)
rng = np.random.default_rng(0)
tokens, ptok = rng.integers(0, 6561, n), rng.integers(0, 6561, p)
pmel, emb = rng.standard_normal((2 * p, 80)).astype(np.float32) - 4, rng.standard_normal(192)
def hwm():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) // 1024
base = hwm()
t0 = time.perf_counter()
cache = 0
if mode == 'stream':
    s = t2w.stream(ptok, pmel, emb, n_timesteps=steps, rng=rng)
    for i in range(0, n, 25):
        s.push(tokens[i:i + 25])
    cache = s.flow.cache_bytes
    s.finish()
else:
    t2w(tokens, ptok, pmel, emb, n_timesteps=steps, rng=rng)
print(json.dumps({'loaded_mb': base, 'peak_mb': hwm(), 'seconds': time.perf_counter() - t0,
                  'cache_mb': cache // 2**20}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=75, help="75 = a 3 s prompt")
    parser.add_argument("--seconds", default="10,30", help="sentence lengths to time (25 tokens per second)")
    parser.add_argument("--steps", default="10,5", help="Euler step counts (first = upstream's 10)")
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-upstream", action="store_true")
    args = parser.parse_args()

    from tests.helpers import cosyvoice_reference as ref
    ref.install_shim()
    import torch
    torch.set_num_threads(args.threads)
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
    from cosyedge.export.cosyvoice.v2.convert import convert

    result: dict = {"cpu": {"model": cpu_model(), "flags": cpu_flags()}, "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_before": load_average(), "python": platform.python_version(), "runs": []}
    work = args.workdir or Path(tempfile.mkdtemp(prefix="cv2stream-"))
    flow, hift = ref.build_flow(args.size, seed=0), ref.build_hift(args.size, seed=0)
    src = ref.write_model_dir(work / "src", flow, hift, size=args.size)
    model = work / "int8"
    if not (model / "manifest.json").is_file():
        t0 = time.perf_counter()
        convert(src, model, quantize="int8", steps=["flow", "hift"])
        result["convert_s"] = round(time.perf_counter() - t0, 1)
    t2w = Token2Wav.load(model, threads=args.threads)
    rng = np.random.default_rng(0)
    p = args.prompt_tokens
    ptok, pmel = rng.integers(0, 6561, p), rng.standard_normal((2 * p, 80)).astype(np.float32) - 4
    emb = rng.standard_normal(192)
    steps_list = [int(s) for s in args.steps.split(",") if s]
    for seconds in [float(s) for s in args.seconds.split(",") if s]:
        n = int(seconds * 25)
        tokens = rng.integers(0, 6561, n)
        for steps in steps_list:
            run: dict = {"audio_s": seconds, "tokens": n, "steps": steps}
            t0 = time.perf_counter()
            mel = t2w.mel(tokens, ptok, pmel, emb, n_timesteps=steps)
            t1 = time.perf_counter()
            t2w.vocoder(mel, rng=rng)
            t2 = time.perf_counter()
            run["whole_flow_s"], run["whole_hift_s"] = round(t1 - t0, 2), round(t2 - t1, 2)
            t2w.flow.prompt_states.clear()  # time the prompt's chunks too (a voice's first sentence)
            stream = t2w.stream(ptok, pmel, emb, n_timesteps=steps, rng=rng)
            t0 = time.perf_counter()
            stream.push(np.zeros(0, dtype=np.int64))  # the engine does this while the LLM starts
            run["stream_prompt_chunks_s"] = round(time.perf_counter() - t0, 2)
            first = None
            for i in range(0, n, 25):
                hops = stream.push(tokens[i:i + 25])
                if hops and first is None:
                    first = time.perf_counter() - t0
            stream.finish()
            run["stream_total_s"] = round(time.perf_counter() - t0, 2)
            run["stream_first_hop_render_s"] = round(first, 2) if first is not None else None
            run["stream_cache_mb"] = stream.flow.cache_bytes // 2 ** 20
            t2w.flow.prompt_states.clear()
            fs = t2w.flow.stream(ptok, pmel, emb, n_timesteps=steps)
            t0 = time.perf_counter()
            for i in range(0, n, 25):
                fs.push(tokens[i:i + 25])
            fs.finish()
            run["stream_flow_s"] = round(time.perf_counter() - t0, 2)
            run["stream_vs_whole_flow"] = round(run["stream_flow_s"] / run["whole_flow_s"], 3)
            run["rtf_whole"] = round((run["whole_flow_s"] + run["whole_hift_s"]) / seconds, 3)
            run["rtf_stream_render"] = round(run["stream_total_s"] / seconds, 3)
            if not args.no_upstream and seconds <= 10 and steps == 10:
                run.update(_upstream(flow, hift, tokens, ptok, pmel, emb))
            for mode in ("stream", "whole"):
                out = subprocess.run([str(REPO / ".venv/bin/python"), "-c", _CHILD, str(model), mode, str(n), str(p),
                                      str(steps), str(args.threads)], capture_output=True, text=True, cwd=REPO)
                run[f"rss_{mode}"] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 \
                    else out.stderr[-300:]
            print(json.dumps(run), flush=True)
            result["runs"].append(run)
    result["load_after"] = load_average()
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


def _upstream(flow, hift, tokens, ptok, pmel, emb) -> dict:
    """Upstream PyTorch: the 46dfe04 hop loop (prefix recomputed per hop) and the whole sentence."""
    import torch
    from cosyvoice.utils.common import fade_in_out

    tok = torch.from_numpy(tokens)[None]
    pt = torch.from_numpy(ptok)[None]
    pf = torch.from_numpy(pmel)[None]
    e = torch.from_numpy(emb.astype(np.float32))[None]
    i32 = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731

    def inference(n: int, streaming: bool, finalize: bool):
        mel, _ = flow.inference(token=tok[:, :n], token_len=i32(n), prompt_token=pt, prompt_token_len=i32(pt.shape[1]),
                                prompt_feat=pf, prompt_feat_len=i32(pf.shape[1]), embedding=e, streaming=streaming,
                                finalize=finalize)
        return mel

    out: dict = {}
    with torch.no_grad():
        t0 = time.perf_counter()
        mel = inference(tok.shape[1], False, True)
        t1 = time.perf_counter()
        hift.inference(speech_feat=mel)
        t2 = time.perf_counter()
        out["upstream_whole_flow_s"], out["upstream_whole_hift_s"] = round(t1 - t0, 2), round(t2 - t1, 2)
        pad = -pt.shape[1] % 25
        offset, first, cache, window = 0, None, None, np.hamming(2 * 8 * 480)
        t0 = time.perf_counter()
        flow_s = 0.0
        while True:
            hop = 25 + pad if offset == 0 else 25
            final = tok.shape[1] - offset < hop + 3
            f0 = time.perf_counter()
            mel = inference(tok.shape[1] if final else offset + hop + 3, True, final)[:, :, 2 * offset:]
            flow_s += time.perf_counter() - f0
            source_cache = torch.zeros(1, 1, 0)
            if cache is not None:
                mel, source_cache = torch.concat([cache["mel"], mel], dim=2), cache["source"]
            speech, source = hift.inference(speech_feat=mel, cache_source=source_cache)
            if cache is not None:
                speech = fade_in_out(speech, cache["speech"], window)
            if first is None:
                first = time.perf_counter() - t0
            if final:
                break
            cache = {"mel": mel[:, :, -8:], "source": source[:, :, -3840:], "speech": speech[:, -3840:]}
            offset += hop
        out["upstream_stream_total_s"] = round(time.perf_counter() - t0, 2)
        out["upstream_stream_flow_s"] = round(flow_s, 2)
        out["upstream_stream_first_hop_render_s"] = round(first, 2)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
