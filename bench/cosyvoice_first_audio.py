#!/usr/bin/env python3
"""CosyVoice2 first audio and end-to-end RTF at an API client, full size (random weights), beside upstream.

    flock /work/locks/heavy .venv-ref/bin/python bench/cosyvoice_first_audio.py prepare --work W
    flock /work/locks/heavy .venv/bin/python bench/cosyvoice_first_audio.py api --work W --json W/api.json
    flock /work/locks/heavy .venv-ref/bin/python bench/cosyvoice_first_audio.py upstream --work W --json W/up.json

Stages (each a process of its own; ``prepare`` and ``upstream`` need the PyTorch reference venv, ``api``
 runs in the app's):

* ``prepare``: the CosyVoice2-0.5B checkpoint at full size with random weights (upstream Qwen2LM at
  Qwen2.5-0.5B dims, flow, HiFT; seed 0), the tiny test tokenizer and stand-ins for campplus and the
  speech tokenizer (a cached voice never runs them in the timed requests), converted int8 as shipped
  into ``W/models/cosyvoice2-bench``. The LLM's end-of-speech and fill logits are pushed to -1e4 so
  that every run, ours and upstream's, makes exactly 20 x the text's tokens (upstream's
  ``max_token_text_ratio``): the 13-token text below is 260 speech tokens, 10.4 s of audio.
* ``api``: ``app.py`` in the app's venv (no torch) on that model, ``--onnx-threads`` as given; a voice
  saved through ``POST /v1/audio/voices`` (3.2 s recording + transcript, so zero-shot mode; saving
  encodes it, so it is a cached voice). Then for each step count, after a short warm-up sentence
  with that voice: ``/v1/audio/speech`` pcm with ``stream_format: "audio"`` (time to the first body
  byte = first PCM byte, every read's time and size, the end), the same not streamed (time to the
  whole answer), and the stream with another saved voice never used before (its flow prompt state
  is computed in that request: a voice's first sentence); the app's peak RSS.
  The page's live player is simulated on the streamed reads (its buffering rule from
  ``cosyedge/web/ui.py``) to give its playback start.
* ``upstream``: upstream PyTorch (FunAudioLLM/CosyVoice 46dfe04's ``CosyVoice2Model.tts`` loop: the
  LLM in a thread, hops of 25 tokens + the prompt's padding + 3 look-ahead, the prefix recomputed
  per hop, HiFT with its mel/source cache and fade, the 0.1 s poll) on the same checkpoint and the
  same lengths, ``stream=True`` and ``False``, ``torch.set_num_threads(threads)``.

``estimator`` (no torch) times one streamed estimator call against 0-600 cached frames: what the
key/value cache costs per call as a sentence grows. ``render`` (no torch, no LLM) gives the CPU seconds
of the bench sentence's token2wav streamed (one token at a time, cached voice) and not streamed, side
by side in one process; the first hop's tokens and the seconds (CPU and wall) to its audio, the hop
render + HiFT part of the first-audio floor.

Each stage prints JSON lines and, with ``--json``, writes its record.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import emit, loadavg, machine_info, report, running_app  # noqa: E402

MODEL_ID = "cosyvoice2-bench"
TEXT = "Hello world, the quick brown fox jumps over the lazy dog."   # 13 tokens of the tiny tokenizer
#: ``--text long``: one sentence of 37 tokens (the normalizer keeps it whole): 740 speech tokens, 29.6 s.
LONG_TEXT = ("Hello world, the quick brown fox jumps over the lazy dog, then the quick brown fox jumps over the "
             "lazy dog, and the quick brown fox jumps over the lazy one.")
TRANSCRIPT = "Read this slowly and warmly, please."                 # 8 tokens
WARM_TEXT = "Hello world."
SPEECH_TOKENS = 6561                                                # CosyVoice2's speech vocabulary
MAX_RATIO = 20                                                      # upstream max_token_text_ratio
PROMPT_SECONDS = 3.2
SAMPLE_RATE = 24000


# -- prepare -----------------------------------------------------------------------------------------


def stage_prepare(work: Path, size: str) -> dict:
    import torch

    from bench.cosyvoice_llm import build_upstream_llm
    from cosyedge.export.cosyvoice.v2.convert import convert
    from tests.helpers import cosyvoice_reference as ref
    from tests.helpers.cosyvoice_tiny import campplus_standin, speech_tokenizer_standin
    from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

    t0 = time.perf_counter()
    src = work / "src"
    ref.write_model_dir(src, flow=ref.build_flow(size, seed=0), hift=ref.build_hift(size, seed=0), size=size)
    llm, config = build_upstream_llm(size)
    with torch.no_grad():  # never ends early: every run makes max_len tokens, ours and upstream's
        llm.llm_decoder.bias[SPEECH_TOKENS:] = -1e4
    qwen = src / "CosyVoice-BlankEN"
    qwen.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(qwen / "config.json"))
    write_tiny_tokenizer(qwen)
    torch.save(llm.state_dict(), src / "llm.pt")
    del llm
    campplus_standin(src / "campplus.onnx")
    speech_tokenizer_standin(src / "speech_tokenizer_v2.onnx")
    t1 = time.perf_counter()
    convert(src, work / "models" / MODEL_ID, quantize="int8", force=True)
    return {"stage": "prepare", "size": size, "build_s": round(t1 - t0, 1),
            "convert_s": round(time.perf_counter() - t1, 1)}


# -- api ---------------------------------------------------------------------------------------------


def prompt_wav(seconds: float = PROMPT_SECONDS, sr: int = 16000, seed: int = 0) -> bytes:
    """A voiced, never-silent recording (harmonics of 140 Hz + ``seed``, slow vibrato, a little noise)."""
    import soundfile as sf

    t = np.arange(int(sr * seconds)) / sr
    f0 = 140 + seed + 8 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    audio = sum(0.2 / k * np.sin(k * phase) for k in range(1, 6)) + 0.01 * np.random.default_rng(seed).standard_normal(t.size)
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), sr, format="WAV")
    return buf.getvalue()


def simulate_player(reads: list[tuple[float, int]], expect_s: float, sr: int = SAMPLE_RATE) -> float | None:
    """When the page's live player (``LIVE_PLAYER_JS``) starts playing, seconds after the request.

    Its rule: hold what came until it lasts while the rest (expected length minus what came) arrives
    at the rate measured so far (audio seconds per second between the first and the latest piece
    once they are 0.25 s apart; before that, since the request): ``buffer >= rest * (1 - rate) / rate``.
    ``reads`` are (seconds after the request, PCM bytes) of each read, as the page's reader gets them.
    """
    received = first_at = first_len = 0.0
    for at, size in reads:
        duration = size / 2 / sr
        if not first_at:
            first_at, first_len = at, duration
        received += duration
        if received > first_len and at - first_at >= 0.25:
            rate = (received - first_len) / (at - first_at)
        else:
            rate = received / max(1e-3, at)
        rest = max(0.0, expect_s - received)
        want = 0.0 if rate >= 1 else rest * (1 - rate) / max(rate, 1e-3)
        if received >= want:  # nothing is playing yet, so what is ahead is all that came
            return at
    return reads[-1][0] if reads else None


def _speech(client, url: str, voice: str, fields: dict, streamed: bool, text: str = TEXT) -> dict:
    """One ``/v1/audio/speech`` request with ``fields`` (``flow_steps`` or ``quality``) added to its body."""
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "pcm", **fields}
    if streamed:
        body["stream_format"] = "audio"
    reads: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    with client.stream("POST", url + "/v1/audio/speech", json=body, timeout=900) as r:
        r.raise_for_status()
        report = json.loads(r.headers.get("x-cosyedge-report", "{}"))
        job_id = r.headers["x-cosyedge-job-id"]
        for data in r.iter_raw():
            if data:
                reads.append((time.perf_counter() - t0, len(data)))
    total = time.perf_counter() - t0
    # The job's own tail (its history entry, the speaker similarity) must not overlap the next request.
    while client.get(f"{url}/jobs/{job_id}", timeout=60).json().get("state") in ("waiting", "running"):
        time.sleep(0.05)
    audio_s = sum(size for _, size in reads) / 2 / SAMPLE_RATE
    out = {"streamed": streamed, **fields, "audio_s": round(audio_s, 3), "total_s": round(total, 3),
           "rtf": round(total / audio_s, 3), "first_byte_s": round(reads[0][0], 3),
           "notes": [n for n in report.get("notes", []) if n.startswith(("flow steps", "quality"))]}
    if streamed:
        out["player_start_s"] = round(simulate_player(reads, audio_s), 3)
        out["reads"] = [(round(t, 3), n) for t, n in reads]
    return out


def _peak_rss_mb(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {line.split(":")[0]: int(line.split()[1]) // 1024 for line in status if line.startswith(("VmRSS", "VmHWM"))}


def stage_api(work: Path, threads: int, settings: list[dict], rounds: int, text: str = TEXT) -> dict:
    """``settings``: the request fields of each setting timed (``{"flow_steps": 10}``, ``{"quality": "live"}``)."""
    import httpx

    env = {"COSYEDGE_MODELS_DIR": str(work / "models"), "COSYEDGE_MODEL": MODEL_ID,
           "COSYEDGE_OUTPUTS_DIR": str(work / "outputs"), "COSYEDGE_PROMPTS_DIR": str(work / "prompts"),
           "COSYEDGE_LOG_LEVEL": "INFO", "COSYEDGE_IDLE_UNLOAD_MINUTES": "0", "PYTHONPATH": None}
    result: dict = {"stage": "api", "machine": machine_info(), "threads": threads, "text": text, "runs": []}
    with open(work / "app.log", "a", encoding="utf-8") as log, \
            running_app(("--onnx-threads", str(threads)), env, python=ROOT / ".venv/bin/python", timeout=300,
                        stdout=log) as app:
        url = app.url
        with httpx.Client() as client:
            t0 = time.perf_counter()

            def save(seed: int) -> str:
                voice = client.post(url + "/v1/audio/voices", timeout=900,
                                    data={"name": f"bench-{int(time.time())}-{seed}", "consent": "true",
                                          "transcript": TRANSCRIPT},
                                    files={"audio_sample": ("prompt.wav", prompt_wav(seed=seed), "audio/wav")})
                voice.raise_for_status()
                return voice.json()["id"]

            # Voice 0 is used by every warm-up; the others are encoded by a 1-step warm-up and then used
            # once each: that sentence has no flow prompt state at its step count yet (a voice's first use).
            voice_id = save(0)
            result["voice_save_s"] = round(time.perf_counter() - t0, 2)  # includes loading the model
            fresh = {(r, i): save(1 + r * len(settings) + i) for r in range(rounds) for i in range(len(settings))}
            for streamed in (True, False):  # warm: the sessions' first runs
                _speech(client, url, voice_id, settings[0], streamed, WARM_TEXT)
            for voice in fresh.values():  # encoded now (saving with no model loaded does not), at 1 step
                _speech(client, url, voice, {"flow_steps": 1}, True, WARM_TEXT)
            result["warm_s"] = round(time.perf_counter() - t0, 2)
            result["loadavg_before"] = loadavg()

            def measure(r: int, fields: dict, voice: str, streamed: bool, kind: str) -> None:
                run = {"round": r, "kind": kind, **_speech(client, url, voice, fields, streamed, text),
                       "loadavg": loadavg()}
                emit({k: v for k, v in run.items() if k != "reads"})
                result["runs"].append(run)

            for r in range(rounds):
                for i, fields in enumerate(settings):
                    measure(r, fields, fresh[r, i], True, "streamed, voice's first sentence")
                    _speech(client, url, voice_id, fields, True, WARM_TEXT)  # the voice's state at this setting
                    measure(r, fields, voice_id, True, "streamed, cached voice")
                    measure(r, fields, voice_id, False, "not streamed, cached voice")
        result["app_rss_mb"] = _peak_rss_mb(app.proc.pid)
        result["loadavg_after"] = loadavg()
        threads_line = [line for line in (work / "app.log").read_text().splitlines() if "CosyVoice threads" in line]
        result["thread_plan"] = threads_line[-1].split("CosyVoice threads:", 1)[1].strip() if threads_line else None
    return result


# -- upstream ----------------------------------------------------------------------------------------


def _upstream_modules(work: Path, size: str):
    import torch

    from bench.cosyvoice_llm import build_upstream_llm
    from tests.helpers import cosyvoice_reference as ref

    src = work / "src"
    llm, _ = build_upstream_llm(size)
    llm.load_state_dict(torch.load(src / "llm.pt", map_location="cpu", weights_only=True))
    flow, hift = ref.build_flow(size, seed=0), ref.build_hift(size, seed=0)
    flow.load_state_dict(torch.load(src / "flow.pt", map_location="cpu", weights_only=True))
    hift.load_state_dict(torch.load(src / "hift.pt", map_location="cpu", weights_only=True))
    return llm.eval(), flow.eval(), hift.eval()


def upstream_tts(llm, flow, hift, text, prompt_text, prompt_speech, prompt_feat, embedding, stream: bool,
                 stop: threading.Event | None = None, marks: dict | None = None):
    """46dfe04's ``CosyVoice2Model.tts`` + ``token2wav`` (CPU, fp32), yielding (seconds, audio) per piece;
    ``stop`` ends the LLM thread early (after the pieces wanted); ``marks`` gets the LLM's times."""
    stop = stop or threading.Event()
    marks = {} if marks is None else marks
    import torch
    from cosyvoice.utils.common import fade_in_out

    hop, mel_cache, source_cache_len = 25, 8, 8 * 480
    window = np.hamming(2 * source_cache_len)
    tokens: list[int] = []
    ended = threading.Event()
    i32 = lambda values: torch.tensor([values], dtype=torch.int32)  # noqa: E731

    def llm_job() -> None:
        with torch.no_grad():
            for token in llm.inference(text=i32(text), text_len=torch.tensor([len(text)], dtype=torch.int32),
                                       prompt_text=i32(prompt_text),
                                       prompt_text_len=torch.tensor([len(prompt_text)], dtype=torch.int32),
                                       prompt_speech_token=i32(prompt_speech),
                                       prompt_speech_token_len=torch.tensor([len(prompt_speech)], dtype=torch.int32),
                                       embedding=torch.zeros(0, 192)):
                tokens.append(int(token))
                if len(tokens) == 1:
                    marks["llm_first_token_s"] = time.perf_counter() - t0
                if stop.is_set():
                    break
        marks["llm_end_s"], marks["llm_tokens"] = time.perf_counter() - t0, len(tokens)
        ended.set()

    pt, pf, emb = i32(prompt_speech), torch.from_numpy(prompt_feat)[None], torch.from_numpy(embedding)[None]
    cache: dict | None = None

    def token2wav(token_list, offset: int, streaming: bool, finalize: bool):
        nonlocal cache
        tok = torch.tensor([token_list])
        with torch.no_grad():
            mel, _ = flow.inference(token=tok, token_len=torch.tensor([tok.shape[1]], dtype=torch.int32), prompt_token=pt,
                                    prompt_token_len=torch.tensor([pt.shape[1]], dtype=torch.int32), prompt_feat=pf,
                                    prompt_feat_len=torch.tensor([pf.shape[1]], dtype=torch.int32), embedding=emb,
                                    streaming=streaming, finalize=finalize)
            mel = mel[:, :, offset * 2:]
            source = torch.zeros(1, 1, 0)
            if cache is not None:
                mel, source = torch.concat([cache["mel"], mel], dim=2), cache["source"]
            speech, new_source = hift.inference(speech_feat=mel, cache_source=source)
            if cache is not None:
                speech = fade_in_out(speech, cache["speech"], window)
            if not finalize:
                cache = {"mel": mel[:, :, -mel_cache:], "source": new_source[:, :, -source_cache_len:],
                         "speech": speech[:, -source_cache_len:]}
                speech = speech[:, :-source_cache_len]
        return speech.numpy()[0]

    t0 = time.perf_counter()
    thread = threading.Thread(target=llm_job, daemon=True)
    thread.start()
    if stream:
        offset, pad = 0, -len(prompt_speech) % hop
        while True:
            time.sleep(0.1)
            this_hop = hop + pad if offset == 0 else hop
            if len(tokens) - offset >= this_hop + flow.pre_lookahead_len:
                marks.setdefault("hop_start_s", time.perf_counter() - t0)
                audio = token2wav(tokens[:offset + this_hop + flow.pre_lookahead_len], offset, True, False)
                offset += this_hop
                yield time.perf_counter() - t0, audio
            if ended.is_set() and len(tokens) - offset < this_hop + flow.pre_lookahead_len:
                break
        thread.join()
        audio = token2wav(list(tokens), offset, False, True)
        yield time.perf_counter() - t0, audio
    else:
        thread.join()
        audio = token2wav(list(tokens), 0, False, True)
        yield time.perf_counter() - t0, audio


def stage_upstream(work: Path, threads: int, size: str, prompt_tokens: int) -> dict:
    import torch

    from cosyedge.engines.cosyvoice.common.tokenizer import COSYVOICE2_SPECIALS, TextTokenizer

    torch.set_num_threads(threads)
    tokenizer = TextTokenizer.load(work / "models" / MODEL_ID / "tokenizer", COSYVOICE2_SPECIALS)
    text, prompt_text = tokenizer.encode(TEXT), tokenizer.encode(TRANSCRIPT)
    llm, flow, hift = _upstream_modules(work, size)
    rng = np.random.default_rng(0)
    prompt_speech = rng.integers(0, SPEECH_TOKENS, prompt_tokens).tolist()
    prompt_feat = (rng.standard_normal((2 * prompt_tokens, 80)) - 4).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    result: dict = {"stage": "upstream", "machine": machine_info(), "threads": threads, "text_tokens": len(text),
                    "prompt_tokens": prompt_tokens, "runs": []}
    # A short warm-up: torch's first calls (allocations, kernel choices) must not count.
    list(upstream_tts(llm, flow, hift, text[:2], prompt_text, prompt_speech, prompt_feat, embedding, False))
    # Streamed: up to the first hop only (upstream recomputes the prefix at every hop: its whole
    # 10 s sentence takes ~10 minutes here, bench/cosyvoice_stream.py times it); then the whole.
    stop = threading.Event()
    marks: dict = {}
    pieces = upstream_tts(llm, flow, hift, text, prompt_text, prompt_speech, prompt_feat, embedding, True, stop, marks)
    at, audio = next(pieces)
    marks = {k: round(v, 3) for k, v in marks.items()}
    stop.set()
    pieces.close()
    run = {"streamed": True, "steps": 10, "first_audio_s": round(at, 3), "first_hop_audio_s": round(audio.size / SAMPLE_RATE, 3),
           **marks, "loadavg": loadavg()}
    emit(run)
    result["runs"].append(run)
    time.sleep(1.0)  # the LLM thread sees the stop after its current step
    marks = {}
    pieces = list(upstream_tts(llm, flow, hift, text, prompt_text, prompt_speech, prompt_feat, embedding, False,
                               marks=marks))
    audio_s = sum(a.size for _, a in pieces) / SAMPLE_RATE
    run = {"streamed": False, "steps": 10, "first_audio_s": round(pieces[0][0], 3), "total_s": round(pieces[-1][0], 3),
           "audio_s": round(audio_s, 3), "rtf": round(pieces[-1][0] / audio_s, 3),
           **{k: round(v, 3) for k, v in marks.items()}, "loadavg": loadavg()}
    emit(run)
    result["runs"].append(run)
    return result


# -- estimator ---------------------------------------------------------------------------------------


def synthetic_cache(layout, frames: int, rng: np.random.Generator):
    """One Euler step's key/value cache holding ``frames`` frames of noise, in the model's layout."""
    cache = layout.step_cache(frames)
    if layout.blocked:
        share = (rng.standard_normal((2, 2, layout.heads, layout.chunk_frames, layout.head_dim)) * 0.1
                 ).astype(layout.kv_dtype)
        for _ in range(frames // layout.chunk_frames):
            cache.append([share] * layout.attention_layers)
    else:
        cache.append([(rng.standard_normal((frames, layout.attention_layers, 2, 2, layout.inner)) * 0.1)
                      .astype(layout.kv_dtype)])
    return cache


def stage_estimator(work: Path, threads: int, pasts: list[int], reps: int = 3) -> dict:
    """One streamed estimator call (a 50-frame chunk, batch 2) against the frames already cached:
    what the key/value cache costs per call as a sentence grows (no torch). Wall and process CPU
    seconds, the median of ``reps``."""
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav

    t2w = Token2Wav.load(work / "models" / MODEL_ID, threads=threads)
    layout, (_, estimator) = t2w.flow.stream_layout, t2w.flow.stream_sessions
    rng = np.random.default_rng(0)
    frames = 2 * layout.chunk_tokens
    feeds = {"x": rng.standard_normal((2, 80, frames)).astype(np.float32),
             "mu": rng.standard_normal((2, 80, frames)).astype(np.float32), "t": np.full(2, 0.5, np.float32),
             "spks": rng.standard_normal((2, 80)).astype(np.float32), "cond": np.zeros((2, 80, frames), np.float32),
             "conv": np.zeros((layout.conv_layers, 2, layout.conv_tail, layout.conv_channels), np.float32)}
    out: dict = {"stage": "estimator", "machine": machine_info(), "threads": threads, "kv_dtype": layout.kv_dtype,
                 "kv_layout": layout.kv_layout, "calls": []}
    for past in pasts:
        cache_feeds = synthetic_cache(layout, past, rng).feeds()
        estimator.run(None, {**feeds, **cache_feeds})  # warm
        wall, cpu = [], []
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.process_time()
            estimator.run(None, {**feeds, **cache_feeds})
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        call = {"past_frames": past, "seconds": round(float(np.median(wall)), 4),
                "cpu_seconds": round(float(np.median(cpu)), 4),
                "kv_mb": sum(a.nbytes for a in cache_feeds.values()) // 2 ** 20,
                "loadavg": Path("/proc/loadavg").read_text().split()[:3]}
        emit(call)
        out["calls"].append(call)
    return out


def stage_render(work: Path, threads: int, steps_list: list[int], prompt_tokens: int = 80,
                 tokens: int = 260) -> dict:
    """token2wav alone, streamed against not streamed, in one process (no torch, no LLM): the CPU
    seconds each takes for the bench sentence's tokens after a cached voice (the voice's prompt state
    is made by a short sentence first, as the API bench's warm-up does); the stream is fed one token
    at a time, as the engine does. CPU seconds are the process's (both threads), so the ratio holds
    on a loaded machine better than wall time."""
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav

    t2w = Token2Wav.load(work / "models" / MODEL_ID, threads=threads)
    rng = np.random.default_rng(0)
    ptok, target = rng.integers(0, SPEECH_TOKENS, prompt_tokens), rng.integers(0, SPEECH_TOKENS, tokens)
    pmel, emb = (rng.standard_normal((2 * prompt_tokens, 80)) - 4).astype(np.float32), rng.standard_normal(192)
    emb = emb.astype(np.float32)
    out: dict = {"stage": "render", "machine": machine_info(), "threads": threads, "prompt_tokens": prompt_tokens,
                 "tokens": tokens, "kv_layout": t2w.flow.stream_layout.kv_layout, "runs": []}
    for steps in steps_list:
        warm = t2w.stream(ptok, pmel, emb, n_timesteps=steps, rng=np.random.default_rng(1))
        warm.push(target[:30])
        warm.finish()
        t2w(target[:30], ptok, pmel, emb, n_timesteps=steps, rng=np.random.default_rng(1))
        run: dict = {"steps": steps}
        c0, w0 = time.process_time(), time.perf_counter()
        stream = t2w.stream(ptok, pmel, emb, n_timesteps=steps, rng=np.random.default_rng(2),
                            expected_tokens=tokens)
        stream.push(np.zeros(0, dtype=np.int64))
        peak = 0
        for i, token in enumerate(target):
            if stream.push([token]) and "first_hop_cpu_s" not in run:
                run.update(first_hop_cpu_s=round(time.process_time() - c0, 2),
                           first_hop_wall_s=round(time.perf_counter() - w0, 2), first_hop_tokens=i + 1)
            peak = max(peak, stream.flow.cache_bytes)
        stream.finish()
        run.update(streamed_cpu_s=round(time.process_time() - c0, 2), streamed_wall_s=round(time.perf_counter() - w0, 2),
                   cache_mb=peak // 2 ** 20, prompt_cached=stream.flow.prompt_cached)
        c0, w0 = time.process_time(), time.perf_counter()
        t2w(target, ptok, pmel, emb, n_timesteps=steps, rng=np.random.default_rng(2))
        run.update(whole_cpu_s=round(time.process_time() - c0, 2), whole_wall_s=round(time.perf_counter() - w0, 2))
        run["cpu_ratio"] = round(run["streamed_cpu_s"] / run["whole_cpu_s"], 3)
        run["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        emit(run)
        out["runs"].append(run)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("prepare", "api", "upstream", "estimator", "render"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--steps", default="10,5", help="api: flow step counts, comma-separated")
    parser.add_argument("--quality", default="",
                        help="api: quality modes (exact, balanced, live), comma-separated, timed instead of --steps")
    parser.add_argument("--text", choices=("short", "long"), default="short",
                        help="api: the 10.4 s sentence, or one of 29.6 s (memory with a bounded left context)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3, help="estimator: timed calls per cache size")
    parser.add_argument("--prompt-tokens", type=int, default=80, help="upstream: the cached voice's token count")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "prepare":
        result = stage_prepare(args.work, args.size)
    elif args.stage == "api":
        settings = ([{"quality": q} for q in args.quality.split(",") if q] or
                    [{"flow_steps": int(s)} for s in args.steps.split(",") if s])
        result = stage_api(args.work, args.threads, settings, args.rounds, LONG_TEXT if args.text == "long" else TEXT)
    elif args.stage == "render":
        result = stage_render(args.work, args.threads, [int(s) for s in args.steps.split(",") if s])
    elif args.stage == "estimator":
        result = stage_estimator(args.work, args.threads, [0, 150, 300, 450, 600], reps=args.reps)
    else:
        result = stage_upstream(args.work, args.threads, args.size, args.prompt_tokens)
    return report(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
