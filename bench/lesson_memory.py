"""Peak RSS against a lesson's length: one request with the whole text (the text box) against the
lesson path (cosyedge/service/lessons.py: paragraph by paragraph, appended to a WAV on disk).

    .venv/bin/python bench/lesson_memory.py                       # 2,450 / 4,900 / 9,800 characters
    .venv/bin/python bench/lesson_memory.py --chars 2450 4900 --threads 2

Each case runs in a fresh process on the real embedded engine (models/kokoro-int8), through the
service's queue as the page runs it: one short job first (the engine loads), then the measured job.
The figures are the process's RSS after that warm-up job and its high-water mark (VmHWM, which a
child does not inherit from its parent) at the end. The text box path is measured only up to its
limit (5,000 characters). Prints a markdown table.

``--engine paced`` swaps the model for a stand-in that returns a sine tone at the embedded engine's
pace (``--seconds-per-char``, 0.055 s of audio a character: Kokoro's long English text in
the engine table in docs/bench-log/kokoro.md, 556 characters -> 30.5 s) in no time: it measures what the service and the lesson path hold around
the engine, in seconds of CPU instead of minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import loadavg  # noqa: E402

SENTENCES = [
    "Rivers begin high in the hills, where rain and melting snow gather into small streams.",
    "The streams join together and grow wider as they run down towards the valley.",
    "In the middle of its course a river bends from side to side and carries sand and stones.",
    "Near the sea the water slows down, and the mud it carried settles to form a delta.",
    "Farmers have lived beside rivers for thousands of years, because the soil there is rich.",
    "Today we will draw the course of a river and label each part in our notebooks.",
    "Remember that a river always flows from higher ground to lower ground.",
]


def lesson_text(chars: int) -> str:
    """An English lesson of about ``chars`` characters: paragraphs of five sentences."""
    paragraphs, current, total, i = [], [], 0, 0
    while total < chars:
        sentence = f"Point {i + 1}. " + SENTENCES[i % len(SENTENCES)]
        current.append(sentence)
        total += len(sentence) + 1
        i += 1
        if len(current) == 5:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)[:chars].rsplit(".", 1)[0] + "."


def vm_kb(field: str) -> float:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) / 1024


class PacedEngine:
    """A stand-in engine: per sentence, a sine tone as long as the real engine's audio would be."""

    name = "paced"
    model_id = "paced-sine"

    def __init__(self, seconds_per_char: float) -> None:
        from cosyedge.engines.base import Capabilities

        self.seconds_per_char = seconds_per_char
        self.capabilities = Capabilities(native_clone=False, native_instruct=False,
                                         languages=("auto", "en"), sample_rate=24000)

    def presets(self) -> list[str]:
        return ["female_1"]

    def analyze(self, text: str, language: str = "auto"):
        from cosyedge.engines.base import TextAnalysis

        sentences = tuple(s.strip() + "." for s in text.split(".") if s.strip())
        return TextAnalysis(text=text, language=language, sentences=sentences or (text,))

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        import numpy as np

        from cosyedge.engines.base import AudioChunk

        analysis = text if not isinstance(text, str) else self.analyze(text)
        for index, sentence in enumerate(analysis.sentences):
            n = int(len(sentence) * self.seconds_per_char * 24000)
            audio = (0.2 * np.sin(np.arange(n, dtype=np.float32) * 0.05)).astype(np.float32)
            if progress is not None:
                progress(index + 1, len(analysis.sentences))
            yield AudioChunk(audio=audio, sample_rate=24000, text=sentence, index=index,
                             total=len(analysis.sentences))

    def close(self) -> None:
        pass


def worker(mode: str, chars: int, threads: int, engine: str = "kokoro",
           seconds_per_char: float = 0.055) -> dict:
    from cosyedge.config import Settings
    from cosyedge.service.facade import Service
    from cosyedge.service.requests import TTSRequest

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(root=Path(tmp), models_dir=ROOT / "models", onnx_threads=threads,
                            idle_unload_minutes=0, min_free_disk_mb=0).validate()
        factory = (lambda: PacedEngine(seconds_per_char)) if engine == "paced" else None
        service = Service(settings, engine_factory=factory)
        service.start()
        warm = service.submit(TTSRequest(text="Good morning, class.", keep_file=True))
        warm.wait()
        warm.outcome()
        after_warm = vm_kb("VmRSS")
        text = lesson_text(chars)
        started = time.monotonic()
        if mode == "text box":
            job = service.submit(TTSRequest(text=text, keep_file=True))
        else:
            job = service.submit_lesson(service.read_lesson(text.encode(), "lesson.txt"), TTSRequest(text=""))
        job.wait()
        result = job.outcome()
        seconds = time.monotonic() - started
        peak = vm_kb("VmHWM")
        service.close()
    return {"mode": mode, "chars": len(text), "rss_after_warm_mb": after_warm, "peak_mb": peak,
            "audio_s": result.duration, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, nargs="+", default=[2450, 4900, 9800])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engine", choices=("kokoro", "paced"), default="kokoro")
    parser.add_argument("--seconds-per-char", dest="seconds_per_char", type=float, default=0.055)
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "CHARS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.threads, args.engine,
                                args.seconds_per_char)))
        return 0
    load = loadavg()
    cases = [("text box", n) for n in args.chars if n <= 5000] + [("lesson", n) for n in args.chars]
    rows = []
    for mode, chars in cases:
        out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--engine", args.engine,
                              "--seconds-per-char", str(args.seconds_per_char), "--worker", mode, str(chars)],
                             capture_output=True, text=True, check=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"# {rows[-1]}", file=sys.stderr)
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load average before {'/'.join(load)}, "
          f"after {'/'.join(loadavg())}, engine {args.engine}, "
          f"{args.threads} ONNX threads\n")
    print("| path | characters | audio (s) | wall (s) | RSS after warm-up (MB) | peak RSS (MB) | peak - warm (MB) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['chars']} | {r['audio_s']:.0f} | {r['seconds']:.0f} "
              f"| {r['rss_after_warm_mb']:.0f} | {r['peak_mb']:.0f} | {r['peak_mb'] - r['rss_after_warm_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
