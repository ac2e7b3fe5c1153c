"""What instructions do to the embedded engine's audio, and what the post-processing costs.

For each instruction: the same text with and without it, in one process: duration ratio, RMS ratio,
median F0 ratio (WORLD Harvest), plus the wall time of post-processing relative to synthesis.
Run: .venv/bin/python bench/instruct_effects.py [models/kokoro-int8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyedge.instruct import plan as instruct  # noqa: E402
from cosyedge.service import synthesis  # noqa: E402
from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro.engine import KokoroEngine  # noqa: E402

TEXT = "今天天气很好，我们一起去公园散步吧。"
INSTRUCTIONS = ["read it slowly", "慢一点", "very fast", "loudly", "小声一点", "in a low voice",
                "声音高一点", "用开心的语气说", "sadly", "whisper", "用男声读", "用四川话说"]


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def median_f0(x: np.ndarray, sr: int) -> float:
    import pyworld

    f0, _ = pyworld.harvest(x.astype(np.float64), sr, f0_floor=60.0, f0_ceil=600.0)
    return float(np.median(f0[f0 > 0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=Path("models/kokoro-int8"))
    model_dir = parser.parse_args().model_dir
    engine = KokoroEngine.load(model_dir, Settings(onnx_threads=1))
    sr = engine.capabilities.sample_rate
    base = synthesis.synthesize(engine, TEXT, "female_1", SynthesisOptions(), 1000).audio
    b_len, b_rms, b_f0 = len(base), rms(base), median_f0(base, sr)
    print(f"load {os.getloadavg()[0]:.2f}; text {TEXT!r}; plain {b_len / sr:.2f} s, {b_f0:.0f} Hz")
    print("| instruction | plan | duration × | RMS × | median F0 × | synth s | post s |")
    print("|---|---|---|---|---|---|---|")
    for text in INSTRUCTIONS:
        p = instruct.plan_for_engine(text, engine)
        app = instruct.apply_plan(p, SynthesisOptions(), "female_1")
        t0 = time.perf_counter()
        audio = synthesis.synthesize(engine, TEXT, app.voice, app.options, 1000).audio
        t1 = time.perf_counter()
        audio = instruct.postprocess(audio, sr, app.plan)
        t2 = time.perf_counter()
        controls = f"×{p.speed:.2f}, {p.pitch_semitones:+.1f} st, {p.gain_db:+.1f} dB" + (
            f", {p.voice}" if p.voice else "")
        print(f"| {text} | {controls} | {len(audio) / b_len:.2f} | {rms(audio) / b_rms:.2f} | "
              f"{median_f0(audio, sr) / b_f0:.2f} | {t1 - t0:.2f} | {t2 - t1:.2f} |")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
