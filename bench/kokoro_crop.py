"""The generator input crop (engines/kokoro/crop.py): CPU per call and what it changes in the audio.

Run from the repository root with the project's venv (after `python -m cosyedge setup-model`):

    .venv/bin/python bench/kokoro_crop.py                      # 9 calls (first sentences), prints markdown
    .venv/bin/python bench/kokoro_crop.py --all --rounds 3     # every call of the bench texts (31)
    .venv/bin/python bench/kokoro_crop.py --png /tmp/crop.png --write   # recorded in docs/bench-log/kokoro.md

Two fused runners on the runtime graph in one process, without and with ``crop=True``, run the same
inputs interleaved (``--rounds`` times each, process CPU time, median), ``--threads`` intra-op threads
(1 by default: CPU time then compares variants on a shared machine). Per call: rendered/kept audio,
the spoken span (``trim_silence`` of the uncropped output), and over that span the spectral
distance (``checks.spectral_distance_db``), level (RMS dB) and F0 (median |cents|, pyworld
DIO + StoneMask, frames voiced in both) of the cropped output against the uncropped one; ``floor``
is the distance of the uncropped runner from itself with the style vector scaled by 1 + 1e-6 (the
int8 rounding floor). ``lead``/``tail`` margin: frames between the cut and the spoken span (the crop
rule must never cut speech: both must be >= 0). ``--png``: log-mel spectrograms of the first call,
uncropped over cropped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import LOG_DIR, add_write_option, load_average, measured_header, record_round  # noqa: E402
from bench.kokoro_rtf import TEXTS, VOICE  # noqa: E402
from cosyedge.config import from_env  # noqa: E402
from cosyedge.engines.kokoro import crop as crop_graph  # noqa: E402
from cosyedge.engines.kokoro import fused_runtime, model_files  # noqa: E402
from cosyedge.engines.kokoro.engine import KokoroEngine  # noqa: E402
from cosyedge.engines.kokoro.silence import EDGE_PAD_S, SILENCE_THRESHOLD  # noqa: E402
from cosyedge.export.kokoro.checks import spectral_distance_db  # noqa: E402
from cosyedge.catalog.manifest import read_manifest  # noqa: E402

SR = 24_000
HOP = 300  # samples per generator frame

#: Where ``--write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTION = "Generator input crop (`crop`; branch kcrop)"
CURRENT_ROWS = {"bounds": "'Embedded engine: Kokoro-82M int8' table: 'generator input crop: calls that cut speech'",
                "calls": "'Embedded engine: Kokoro-82M int8' table: 'generator input crop: CPU per call' and "
                         "'generator input crop: audio over the spoken span'"}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _f0(audio: np.ndarray) -> np.ndarray:
    import pyworld

    x = audio.astype(np.float64)
    f0, t = pyworld.dio(x, SR, frame_period=5.0)
    return pyworld.stonemask(x, f0, t, SR)


def compare(reference: np.ndarray, audio: np.ndarray) -> dict:
    """Distance, level and F0 of ``audio`` against ``reference`` (same length)."""
    level = 20 * np.log10(np.sqrt(np.mean(audio ** 2)) / np.sqrt(np.mean(reference ** 2)))
    f_ref, f_out = _f0(reference), _f0(audio)
    voiced = (f_ref > 0) & (f_out > 0)
    cents = float(np.median(np.abs(1200 * np.log2(f_out[voiced] / f_ref[voiced])))) if voiced.any() else float("nan")
    return {"db": spectral_distance_db(reference, audio), "level_db": float(level), "cents": cents}


def spoken_span(audio: np.ndarray) -> tuple[int, int]:
    """What ``trim_silence`` keeps: loud samples +- the edge pad."""
    loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
    pad = int(EDGE_PAD_S * SR)
    return max(0, int(loud[0]) - pad), min(audio.size, int(loud[-1]) + pad)


def calls(engine: KokoroEngine, every: bool) -> list[tuple[str, str, list[int]]]:
    out = []
    for lang, sizes in TEXTS.items():
        for size, text in sizes.items():
            sentences = engine.frontend.sentences(text, lang)
            for s in sentences if every else sentences[:1]:
                out.append((lang, size, engine.frontend.token_ids(s.phonemes)))
    return out


def feeds_for(ids: list[int], pack: np.ndarray, scale: float = 1.0) -> dict[str, np.ndarray]:
    return {"tokens": np.array([[0, *ids, 0]], np.int64),
            "style": (pack[len(ids) - 1].reshape(1, 256) * scale).astype(np.float32),
            "speed": np.array([1.0], np.float32)}


def measure(models_dir: Path, threads: int, rounds: int, every: bool, png: Path | None, voice: str) -> dict:
    model_dir = models_dir / "kokoro-int8"
    graph = model_dir / read_manifest(model_dir, model_files.FIX_HINT)["runtime_graph"]["file"]
    engine = KokoroEngine.load(model_dir, from_env(onnx_threads=threads))  # frontend and packs
    pack = engine.style_pack(voice)
    full = fused_runtime.FusedSession(graph, threads)
    cropped = fused_runtime.FusedSession(graph, threads, crop=True)
    rows = []
    for lang, size, ids in calls(engine, every):
        feeds = feeds_for(ids, pack)
        cpu = {"full": [], "crop": []}
        wall = {"full": [], "crop": []}
        for _ in range(rounds):
            for name, session in (("full", full), ("crop", cropped)):
                start, t0 = _cpu(), time.perf_counter()
                outs = session.run(["audio", crop_graph.OFFSET_OUTPUT] if name == "crop" else ["audio"], feeds)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(_cpu() - start)
                if name == "full":
                    reference = outs[0].reshape(-1)
                else:
                    audio, offset = outs[0].reshape(-1), int(outs[1])
        lo, hi = spoken_span(reference)
        inside = offset <= lo and hi <= offset + audio.size
        row = {"lang": lang, "size": size, "phonemes": len(ids), "rendered_s": reference.size / SR,
               "cropped_s": audio.size / SR, "spoken_s": (hi - lo) / SR,
               "lead_margin": (lo - offset) / HOP, "tail_margin": (offset + audio.size - hi) / HOP,
               "cpu_full": statistics.median(cpu["full"]), "cpu_crop": statistics.median(cpu["crop"]),
               "wall_full": statistics.median(wall["full"]), "wall_crop": statistics.median(wall["crop"])}
        if inside:
            row |= compare(reference[lo:hi], audio[lo - offset:hi - offset])
        else:
            row |= {"db": float("nan"), "level_db": float("nan"), "cents": float("nan")}
        nudged = full.run(None, feeds_for(ids, pack, 1 + 1e-6))[0].reshape(-1)
        row["floor_db"] = spectral_distance_db(reference[lo:hi], nudged[lo:hi])
        rows.append(row)
        if png is not None and len(rows) == 1 and inside:
            write_png(png, reference[lo:hi], audio[lo - offset:hi - offset])
        print(f"{lang} {size}: {row}", file=sys.stderr, flush=True)
    full.close()
    cropped.close()
    engine.close()
    return {"threads": threads, "rounds": rounds, "rows": rows, "voice": voice}


BOUNDS_VOICES = ("female_1", "female_2", "male_1", "male_2", "child", "jf_gongitsune", "jf_tebukuro")  # 7 distinct packs
BOUNDS_SPEEDS = (0.8, 1.0, 1.25)
EXTRA_TEXTS = {"en": ["Yes.", "Stop!", "Is it ready?", "Fish", "Thanks, bye.", "Sss."],
               "zh": ["好。", "你好吗？", "是吗"], "ja": ["はい。", "すし", "え？"]}


def bounds(models_dir: Path) -> dict:
    """The crop rule on many calls: every voice x speed x (first sentence of each bench text + short
    extras, some without final punctuation): does the cropped output hold the whole spoken span, how
    much is cut, and the distance over the spoken span (1 thread, one run each)."""
    model_dir = models_dir / "kokoro-int8"
    graph = model_dir / read_manifest(model_dir, model_files.FIX_HINT)["runtime_graph"]["file"]
    engine = KokoroEngine.load(model_dir, from_env(onnx_threads=1))
    full = fused_runtime.FusedSession(graph, 1)
    cropped = fused_runtime.FusedSession(graph, 1, crop=True)
    texts = [(lang, text) for lang in TEXTS for text in [*TEXTS[lang].values(), *EXTRA_TEXTS[lang]]]
    rows = []
    for voice in BOUNDS_VOICES:
        pack = engine.style_pack(voice)
        row = {"voice": voice, "calls": 0, "cut": 0, "lead": [], "tail": [], "db": [], "rendered": 0.0, "returned": 0.0}
        for speed in BOUNDS_SPEEDS:
            for lang, text in texts:
                ids = engine.frontend.token_ids(engine.frontend.sentences(text, lang)[0].phonemes)
                feeds = feeds_for(ids, pack) | {"speed": np.array([speed], np.float32)}
                reference = full.run(None, feeds)[0].reshape(-1)
                audio, offset = cropped.run(None, feeds)
                audio, offset = audio.reshape(-1), int(offset)
                lo, hi = spoken_span(reference)
                row["calls"] += 1
                row["rendered"] += reference.size / SR
                row["returned"] += audio.size / SR
                if offset > lo or hi > offset + audio.size:
                    row["cut"] += 1
                    continue
                row["lead"].append((lo - offset) / HOP)
                row["tail"].append((offset + audio.size - hi) / HOP)
                row["db"].append(spectral_distance_db(reference[lo:hi], audio[lo - offset:hi - offset]))
        rows.append(row)
        print(f"{voice}: {row['calls']} calls, {row['cut']} cut", file=sys.stderr, flush=True)
    full.close()
    cropped.close()
    engine.close()
    return {"rows": rows, "texts": len(texts)}


def bounds_table(res: dict) -> str:
    lines = [f"1 thread; per voice {len(BOUNDS_SPEEDS)} speeds ({', '.join(map(str, BOUNDS_SPEEDS))}) x {res['texts']} "
             f"first sentences (the 9 bench texts + {sum(map(len, EXTRA_TEXTS.values()))} short extras, some without "
             "final punctuation). cut = calls whose cropped output misses part of the uncropped output's spoken span "
             "(must be 0); margins: frames (12.5 ms) between the cut and that span; returned = audio the cropped "
             "runner returns (without its islands) against the uncropped output.",
             "", "| voice | calls | cut | lead margin min / median | tail margin min / median | returned / rendered s "
             "| distance dB median / max |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['voice']} | {r['calls']} | {r['cut']} | {min(r['lead']):.1f} / {np.median(r['lead']):.1f} "
                     f"| {min(r['tail']):.1f} / {np.median(r['tail']):.1f} | {r['returned']:.1f} / {r['rendered']:.1f} "
                     f"| {np.median(r['db']):.2f} / {max(r['db']):.2f} |")
    return "\n".join(lines)


def write_png(path: Path, reference: np.ndarray, audio: np.ndarray) -> None:
    """Log-mel spectrograms (80 bands, 60 dB range) of ``reference`` over ``audio``, and |difference|."""
    from PIL import Image

    def bands(x: np.ndarray) -> np.ndarray:
        n_fft, hop, count = 1024, 256, 80
        frames = np.stack([x[s:s + n_fft] for s in range(0, x.size - n_fft + 1, hop)]) * np.hanning(n_fft)
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        mel = np.linspace(0, 2595 * np.log10(1 + SR / 2 / 700), count + 1)
        edges = np.round(700 * (10 ** (mel / 2595) - 1) * n_fft / SR).astype(int)
        edges = np.maximum.accumulate(np.maximum(edges, np.arange(count + 1)))
        return 10 * np.log10(np.add.reduceat(power, edges[:-1], axis=1) + 1e-12).T[::-1]

    ref, out = bands(reference), bands(audio)
    top = ref.max()

    def gray(db: np.ndarray, span: float) -> np.ndarray:
        return (np.clip(db / span, 0, 1) * 255).astype(np.uint8)

    image = np.concatenate([gray(ref - top + 60, 60), np.full((2, ref.shape[1]), 255, np.uint8),
                            gray(out - top + 60, 60), np.full((2, ref.shape[1]), 255, np.uint8),
                            gray(np.abs(out - ref) * (ref > top - 50), 12)])
    Image.fromarray(image).resize((image.shape[1] * 3, image.shape[0] * 3), Image.NEAREST).save(path)


def table(res: dict) -> str:
    lines = [f"{res['threads']} intra-op thread(s), voice `{res['voice']}`, speed 1.0; uncropped vs cropped fused runner "
             f"interleaved, {res['rounds']} rounds, median process CPU and wall time per call (wall: only "
             f"meaningful on a quiet machine).",
             "",
             "| lang | text | phonemes | rendered s | cropped s | spoken s | lead / tail margin (frames) "
             "| CPU ms full | CPU ms crop | CPU change | wall ms full / crop | distance dB | floor dB | level dB "
             "| F0 cents |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['lang']} | {r['size']} | {r['phonemes']} | {r['rendered_s']:.2f} | {r['cropped_s']:.2f} "
                     f"| {r['spoken_s']:.2f} | {r['lead_margin']:.1f} / {r['tail_margin']:.1f} "
                     f"| {r['cpu_full'] * 1000:.0f} | {r['cpu_crop'] * 1000:.0f} "
                     f"| {100 * (r['cpu_crop'] / r['cpu_full'] - 1):+.0f} % "
                     f"| {r['wall_full'] * 1000:.0f} / {r['wall_crop'] * 1000:.0f} | {r['db']:.2f} | {r['floor_db']:.2f} "
                     f"| {r['level_db']:+.2f} | {r['cents']:.0f} |")
    rows = res["rows"]
    full, crop = sum(r["cpu_full"] for r in rows), sum(r["cpu_crop"] for r in rows)
    lines.append(f"| all | {len(rows)} calls | {sum(r['phonemes'] for r in rows)} "
                 f"| {sum(r['rendered_s'] for r in rows):.1f} | {sum(r['cropped_s'] for r in rows):.1f} "
                 f"| {sum(r['spoken_s'] for r in rows):.1f} "
                 f"| min {min(r['lead_margin'] for r in rows):.1f} / {min(r['tail_margin'] for r in rows):.1f} "
                 f"| {full * 1000:.0f} | {crop * 1000:.0f} | {100 * (crop / full - 1):+.0f} % "
                 f"| {sum(r['wall_full'] for r in rows) * 1000:.0f} / {sum(r['wall_crop'] for r in rows) * 1000:.0f} "
                 f"| max {max(r['db'] for r in rows):.2f} | max {max(r['floor_db'] for r in rows):.2f} "
                 f"| max {max(abs(r['level_db']) for r in rows):.2f} | max {max(r['cents'] for r in rows):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "models"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--all", action="store_true", help="every call of the bench texts, not only first sentences")
    parser.add_argument("--voice", default=VOICE)
    parser.add_argument("--png", type=Path, help="spectrogram PNG of the first call (uncropped / cropped / |diff|)")
    parser.add_argument("--bounds", action="store_true", help="only the crop-rule table over voices and speeds (~6 min)")
    add_write_option(parser, LAB_LOG)
    args = parser.parse_args(argv)
    started, load_before = dt.datetime.now(dt.timezone.utc), load_average()
    if args.bounds:
        text = bounds_table(bounds(Path(args.models_dir)))  # before the header: it takes the end time and load
        body = measured_header(started, "python bench/kokoro_crop.py " + " ".join(argv or sys.argv[1:]), load_before) \
            + "\n\n" + text
        print(body)
        if args.write:
            record_round(args.write, SECTION, "bounds", started, body, CURRENT_ROWS["bounds"])
        return 0
    res = measure(Path(args.models_dir), args.threads, args.rounds, args.all, args.png, args.voice)
    body = measured_header(started, "python bench/kokoro_crop.py " + " ".join(argv or sys.argv[1:]), load_before) \
        + "\n\n" + table(res)
    print(body)
    if args.write:
        key = "calls" if args.voice == VOICE else f"calls-{args.voice}"
        record_round(args.write, SECTION, key, started, body, CURRENT_ROWS["calls"] if key == "calls" else "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
