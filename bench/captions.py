"""What captions cost, and whether a long lesson's captions are still right at its end.

    .venv/bin/python bench/captions.py cost                 # share of synthesis time, three texts
    .venv/bin/python bench/captions.py drift --chars 60000  # a 60,000-character lesson, real engine
    .venv/bin/python bench/captions.py drift --chars 60000 --write

Both run the real embedded engine (models/kokoro-int8, whose runtime graph gives the durations).

``cost``: per text, the synthesis as the service runs it (``service.synthesis.synthesize``: the
engine, the joiner, the captions) and, in the same run, what the captions add: the caption track's
work on every piece, the SRT and WebVTT files, and the Kokoro frontend's word placement (the text
pass with and without it, interleaved, best of three). Goal: at most 2 % of the synthesis time.

``drift``: a lesson of ``--chars`` characters (bench/lesson_memory.py's English lesson, paragraphs of
five sentences) read by ``service.lessons.synthesize_lesson`` into a WAV with its captions; then, in
the finished WAV, every paragraph's start (the end of the 0.6 s of silence before it) against the
nearest cue start (the paragraph's first cue, unless the captions drifted), and the WAV's end
against the last cue's end. Goal: the last
cue within 50 ms of the audio (no drift).

Lab log: docs/bench-log/service-and-web.md ("Captions").
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LOG_DIR, ROOT, add_write_option, load_average, measured_header, record_round  # noqa: E402

LOG = LOG_DIR / "service-and-web.md"
CURRENT_ROWS = ("'captions: cost against synthesis' and "
                "'captions: a 60,000-character lesson, last cue against the audio'")
TEXTS = {
    "zh": ("我们今天学习河流。河流从高山上开始，雨水和融化的雪水汇成小溪。小溪汇合在一起，越流越宽，"
           "一直流向山谷。在中游，河流左右弯曲，带着沙子和石头。靠近大海的地方，水流变慢，泥沙沉积下来，"
           "形成三角洲。几千年来，农民一直住在河边，因为那里的土地很肥沃。") * 2,
    "en": ("Rivers begin high in the hills, where rain and melting snow gather into small streams. The streams "
           "join together and grow wider as they run down towards the valley. In the middle of its course a "
           "river bends from side to side and carries sand and stones. Near the sea the water slows down, and "
           "the mud it carried settles to form a delta. ") * 2,
    "mixed": ("今天我们学习英语单词 river，它的意思是河流。Rivers run to the sea. 请大家跟我读：river, stream, "
              "delta。A delta forms where the water slows down. 明天我们考试，请认真复习。") * 2,
}


def engine_and_settings():
    from cosyedge.config import from_env
    from cosyedge.engines.loader import load_engine

    settings = from_env({}, models_dir=ROOT / "models", onnx_threads=2)
    engine = load_engine(settings)
    if "durations" not in (engine.session.output_names if hasattr(engine.session, "output_names") else []):
        print("note: this runtime graph has no durations output (run setup-model): sentence cues only",
              file=sys.stderr)
    return engine, settings


def cost(rounds: int) -> str:
    """The table of the captions' share of synthesis time per text."""
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.kokoro import frontend as kokoro_frontend
    from cosyedge.service import captions as caption_module
    from cosyedge.service.synthesis import synthesize

    engine, settings = engine_and_settings()
    track_time = [0.0]
    real_add = caption_module.CaptionTrack.add

    def timed_add(self, *args, **kwargs):  # noqa: ANN001, ANN202 - the track's own work, timed
        start = time.perf_counter()
        try:
            return real_add(self, *args, **kwargs)
        finally:
            track_time[0] += time.perf_counter() - start

    caption_module.CaptionTrack.add = timed_add
    lines = ["| text | chars | audio s | synthesis s | caption track ms | files ms | word placement ms | "
             "captions / synthesis |", "|---|---|---|---|---|---|---|---|"]
    real_place = kokoro_frontend.place_words
    try:
        for name, text in TEXTS.items():
            synth, track, files = [], [], []
            for _ in range(rounds):
                track_time[0] = 0.0
                start = time.perf_counter()
                out = synthesize(engine, text, "female_1", SynthesisOptions(), settings.max_text_chars)
                synth.append(time.perf_counter() - start)
                track.append(track_time[0])
                start = time.perf_counter()
                out.captions.render("srt"), out.captions.render("vtt")
                files.append(time.perf_counter() - start)
            with_words, without = [], []
            for _ in range(rounds):  # the frontend's text pass with and without the word placement, interleaved
                kokoro_frontend.place_words = real_place
                start = time.perf_counter()
                engine.frontend.sentences(text)
                with_words.append(time.perf_counter() - start)
                kokoro_frontend.place_words = lambda *args: ()
                start = time.perf_counter()
                engine.frontend.sentences(text)
                without.append(time.perf_counter() - start)
            kokoro_frontend.place_words = real_place
            placing = max(0.0, min(with_words) - min(without))
            best = min(synth)
            share = (min(track) + min(files) + placing) / best
            lines.append(f"| {name} | {len(text)} | {out.duration:.1f} | {best:.2f} | {min(track) * 1e3:.1f} | "
                         f"{min(files) * 1e3:.1f} | {placing * 1e3:.1f} | {100 * share:.2f} % |")
    finally:
        caption_module.CaptionTrack.add = real_add
        kokoro_frontend.place_words = real_place
        engine.close()
    return "\n".join(lines)


def drift(chars: int) -> str:
    """The lesson's paragraph starts and end against its captions."""
    import numpy as np
    import soundfile as sf

    from bench.lesson_memory import lesson_text
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.service.lessons import LessonPlan, read_lesson, synthesize_lesson

    engine, settings = engine_and_settings()
    text = lesson_text(chars)
    lesson = read_lesson(text.encode(), "lesson.txt", max(chars + 1000, settings.max_lesson_chars),
                         settings.max_text_chars)
    with tempfile.TemporaryDirectory(prefix="captions-drift-") as folder:
        wav, vtt = Path(folder) / "lesson.wav", Path(folder) / "lesson.vtt"
        start = time.perf_counter()
        run = synthesize_lesson(engine, lesson, LessonPlan("female_1", SynthesisOptions()), wav,
                                caption_paths=[vtt])
        seconds = time.perf_counter() - start
        audio, rate = sf.read(wav, dtype="int16")
    engine.close()
    duration = audio.size / rate
    # paragraph starts in the WAV: the end of each run of >= 0.5 s of exact silence (the paragraph pause)
    silent = np.concatenate([[False], audio == 0, [False]])
    edges = np.flatnonzero(np.diff(silent.astype(np.int8)))
    starts = [0.0] + [b / rate for a, b in zip(edges[::2], edges[1::2]) if (b - a) / rate >= 0.5]
    cues = run.captions.cues
    # each paragraph's start against the nearest cue start (its first cue, unless the captions drifted)
    gaps = [min(abs(cue.start - start) for cue in cues) for start in starts]
    paired = len(starts)
    end_gap = abs(cues[-1].end - duration)
    lines = ["| lesson | paragraphs | cues | audio | made in | paragraph starts found | worst paragraph start "
             "vs its cue | median | last cue end vs audio end |", "|---|---|---|---|---|---|---|---|---|",
             f"| {len(text):,} characters (English) | {run.paragraphs} | {len(cues)} | {duration / 60:.1f} min | "
             f"{seconds / 60:.1f} min | {paired} of {run.paragraphs} | {max(gaps) * 1e3:.1f} ms | "
             f"{statistics.median(gaps) * 1e3:.1f} ms | {end_gap * 1e3:.1f} ms |"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost", help="the captions' share of synthesis time")
    c.add_argument("--rounds", type=int, default=3)
    add_write_option(c, LOG)
    d = sub.add_parser("drift", help="a long lesson's captions against its audio")
    d.add_argument("--chars", type=int, default=60_000)
    add_write_option(d, LOG)
    args = parser.parse_args()
    started, load_before = dt.datetime.now(dt.timezone.utc), load_average()
    table = cost(args.rounds) if args.what == "cost" else drift(args.chars)
    command = f"bench/captions.py {' '.join(sys.argv[1:])}"
    body = measured_header(started, command, load_before) + "\n\n" + table
    print(body)
    if args.write:
        record_round(args.write, f"Captions ({args.what})", command, started, body, CURRENT_ROWS)


if __name__ == "__main__":
    main()
