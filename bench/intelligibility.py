"""Intelligibility check: how clearly each preset reads zh, en and ja, heard by an offline Whisper.

Every sentence of ``bench/intelligibility_sentences.json`` is read by every preset in its language
with the embedded engine, transcribed by ``cosyedge.listening.asr`` (Whisper base, the language named) and
scored by pronunciation (``cosyedge.listening.intelligibility``: toned pinyin syllables, kana, words). WAVs
and transcripts are cached under ``test-artifacts/intelligibility/`` by the style pack's bytes,
the text and the models, so a rerun only computes what changed.

Steps (run each under ``flock /work/locks/heavy`` on the shared box):

    .venv/bin/python bench/intelligibility.py table --recipes base --out test-artifacts/intelligibility/base.json
    .venv/bin/python bench/intelligibility.py search --preset female_1 --language zh
    .venv/bin/python bench/intelligibility.py table --recipes current --out test-artifacts/intelligibility/current.json
    .venv/bin/python bench/intelligibility.py mixed            # zh/en speaker similarity of the seed's mixed line
    .venv/bin/python bench/intelligibility.py report --tried test-artifacts/intelligibility/tried.json

``search`` tries light whole blends with another pack and recipes that blend only the timbre half
or only the prosody half, on the ``select`` half of the sentences only; a candidate is
refused when its median F0 moves more than ``MAX_F0_SHIFT`` from the preset's own reading or when
the seed's mixed line (its zh segment with the candidate, its en segment with the preset's en recipe)
loses more than ``MAX_SIMILARITY_DROP`` of speaker similarity. The ``report`` half is never seen by
the search; a recipe goes into ``presets.LANGUAGE_RECIPES`` only when the report half confirms it
(``--tried`` records those that it did not).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import cpu_model, loadavg  # noqa: E402
from cosyedge.listening import asr  # noqa: E402
from cosyedge.listening import intelligibility
from cosyedge.service import synthesis
from cosyedge.engines.base import SynthesisOptions, VoicePrompt  # noqa: E402
from cosyedge.engines.kokoro import presets  # noqa: E402
from cosyedge.engines.kokoro.presets import Recipe  # noqa: E402

SENTENCES = REPO / "bench" / "intelligibility_sentences.json"
RESULTS = REPO / "bench" / "intelligibility_results.json"
CACHE = REPO / "test-artifacts" / "intelligibility"
LANGUAGES = ("zh", "en", "ja")
GOAL = 0.08
MIXED_LINE = "[zh]今天天气真好[en]It's sunny today"
MIXED_SEGMENTS = (("zh", "今天天气真好"), ("en", "It's sunny today"))
MAX_F0_SHIFT = 0.15
MAX_SIMILARITY_DROP = 0.05
BEAM = 5


def load_sentences(path: Path = SENTENCES) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["sentences"]


class Listener:
    """Reads a sentence with a style pack and hears it back, with a disk cache of both steps."""

    def __init__(self, threads: int = 2) -> None:
        from cosyedge.config import Settings
        from cosyedge.engines.kokoro.engine import KokoroEngine

        self.engine = KokoroEngine.load(REPO / "models" / "kokoro-int8",
                                        Settings(root=REPO, onnx_threads=threads).validate())
        self.recognizer = asr.Recognizer(threads=threads, idle_seconds=0)
        (CACHE / "wav").mkdir(parents=True, exist_ok=True)
        (CACHE / "heard").mkdir(parents=True, exist_ok=True)
        self.computed = 0

    def pack(self, made: Recipe) -> np.ndarray:
        return presets.build(self.engine.packs, made)

    def key(self, pack: np.ndarray, text: str, language: str) -> str:
        h = hashlib.sha256(np.ascontiguousarray(pack, dtype="<f4").tobytes())
        h.update(json.dumps([text, language, self.engine.model_id]).encode())
        return h.hexdigest()[:24]

    def speak(self, pack: np.ndarray, text: str, language: str) -> tuple[np.ndarray, int]:
        path = CACHE / "wav" / f"{self.key(pack, text, language)}.wav"
        if path.is_file():
            audio, rate = sf.read(path, dtype="float32")
            return audio, rate
        voice = VoicePrompt(engine=self.engine.name, model_id=self.engine.model_id, arrays={"style": pack})
        result = synthesis.synthesize(self.engine, text, voice, SynthesisOptions(language=language),
                                      max_chars=10_000)
        sf.write(path, result.audio, result.sample_rate, subtype="FLOAT")
        return result.audio, result.sample_rate

    def hear(self, pack: np.ndarray, text: str, language: str) -> str:
        key = self.key(pack, text, language)
        path = CACHE / "heard" / f"{key}.{asr.MODEL_SHA256[:12]}.b{BEAM}.json"
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))["text"]
        audio, rate = self.speak(pack, text, language)
        heard = self.recognizer.transcribe(audio, rate, language, beam_size=BEAM)
        path.write_text(json.dumps(asdict(heard), ensure_ascii=False), encoding="utf-8")
        self.computed += 1
        return heard.text

    def score(self, made: Recipe, sentences: list[dict]) -> dict:
        """Per half and overall: errors, units, rate; and each sentence's transcript."""
        pack = self.pack(made)
        halves: dict[str, intelligibility.Score] = {}
        lines = []
        for s in sentences:
            heard = self.hear(pack, s["text"], s["language"])
            got = intelligibility.score(s["text"], heard, s["language"])
            halves[s["half"]] = halves.get(s["half"], intelligibility.Score(0, 0)) + got
            lines.append({"id": s["id"], "heard": heard, "errors": got.errors, "units": got.units})
        total = sum(halves.values(), intelligibility.Score(0, 0))
        out = {half: {"errors": sc.errors, "units": sc.units, "rate": round(sc.rate, 4)}
               for half, sc in sorted(halves.items())}
        out["all"] = {"errors": total.errors, "units": total.units, "rate": round(total.rate, 4)}
        out["lines"] = lines
        return out

    def median_f0(self, made: Recipe, sentences: list[dict]) -> float:
        from cosyedge.listening.pitch import median_f0

        pack = self.pack(made)
        return float(np.nanmedian([median_f0(*self.speak(pack, s["text"], s["language"])) for s in sentences]))

    def similarity(self, zh: Recipe, en: Recipe) -> float:
        """Speaker similarity of the seed's mixed line: its zh segment read with ``zh``, its en segment
        with ``en`` (the engine reads each tagged run as its own call, so with its own recipe)."""
        from cosyedge.listening.speaker import shared_encoder

        encoder = shared_encoder()
        (la, ta), (lb, tb) = MIXED_SEGMENTS
        a = self.speak(self.pack(zh), ta, la)
        b = self.speak(self.pack(en), tb, lb)
        return round(encoder.similarity(a[0], a[1], b[0], b[1]), 4)


def recipes_for(kind: str) -> dict[str, dict[str, Recipe]]:
    if kind == "base":
        return {p: {lang: Recipe.whole(w) for lang in LANGUAGES} for p, w in presets.PRESETS.items()}
    return {p: {lang: presets.recipe(p, lang) for lang in LANGUAGES} for p in presets.PRESETS}


def cmd_table(args: argparse.Namespace) -> None:
    listener = Listener()
    sentences = load_sentences()
    started = time.monotonic()
    table = {}
    for preset, by_language in recipes_for(args.recipes).items():
        if args.preset and preset not in args.preset:
            continue
        table[preset] = {}
        for language in LANGUAGES:
            made = by_language[language]
            result = listener.score(made, [s for s in sentences if s["language"] == language])
            result["made_of"] = made.made_of()
            table[preset][language] = result
            print(f"{preset:9s} {language} select {result['select']['rate']:.3f} report "
                  f"{result['report']['rate']:.3f} all {result['all']['rate']:.3f}", flush=True)
        table[preset]["mixed_similarity"] = listener.similarity(by_language["zh"], by_language["en"])
        print(f"{preset:9s} mixed-line zh/en similarity {table[preset]['mixed_similarity']}", flush=True)
    meta = machine_meta(started, listener.computed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "recipes": args.recipes, "table": table},
                                         ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"wrote {args.out} ({meta['seconds']} s, {listener.computed} clips computed)")


def candidates(preset: str) -> list[Recipe]:
    """Light whole blends with each other pack, then the preset's prosody under a half-borrowed timbre,
    then its timbre over half-borrowed prosody; the F0 rule refuses most of them for the male presets."""
    own = presets.PRESETS[preset]
    others = [p for p in ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo") if p not in own]

    def mix(weight: float, other: str) -> dict[str, float]:
        out = {k: round(v * (1 - weight), 3) for k, v in own.items()}
        out[other] = round(out.get(other, 0.0) + weight, 3)
        return {k: v for k, v in out.items() if v > 0}

    if own.get("jm_kumo", 0.0) >= 0.5:
        # the only male pack: any female prosody lifts the pitch out of range (measured: +60 % and
        # more at half), so only a lighter share of female timbre over the male prosody is tried
        return [Recipe(mix(w, other), dict(own)) for w in (0.15, 0.3) for other in others if other != "jm_kumo"]
    out = [Recipe.whole(mix(w, other)) for w in (0.3, 0.5) for other in others]
    out += [Recipe(mix(0.5, other), dict(own)) for other in others]
    out += [Recipe(dict(own), mix(0.5, other)) for other in others]
    return out


def cmd_search(args: argparse.Namespace) -> None:
    listener = Listener()
    language = args.language
    select = [s for s in load_sentences() if s["language"] == language and s["half"] == "select"]
    own = Recipe.whole(presets.PRESETS[args.preset])
    partner = presets.recipe(args.preset, "en" if language == "zh" else "zh")
    base_f0 = listener.median_f0(own, select)
    base_sim = listener.similarity(own, partner) if language == "zh" else listener.similarity(partner, own)
    base = listener.score(own, select)["all"]["rate"]
    print(f"{args.preset} {language}: own blend {base:.3f} on the select half, F0 {base_f0:.0f} Hz, "
          f"mixed-line similarity {base_sim}", flush=True)
    rows = []
    for made in candidates(args.preset):
        f0 = listener.median_f0(made, select[:2])  # synthesis only: cheap, and most refusals are here
        shift = abs(f0 / listener.median_f0(own, select[:2]) - 1.0)
        row = {"made_of": made.made_of(), "f0": round(f0, 1), "f0_shift": round(shift, 3)}
        if shift > MAX_F0_SHIFT:
            rows.append({**row, "kept_character": False, "why": "pitch moved"})
            print(f"  {json.dumps(made.made_of())}: F0 {f0:.0f} Hz ({shift:+.0%}) REFUSED (pitch)", flush=True)
            continue
        sim = listener.similarity(made, partner) if language == "zh" else listener.similarity(partner, made)
        if language == "ja":
            sim = base_sim  # the mixed line has no Japanese segment
        ok = sim >= base_sim - MAX_SIMILARITY_DROP
        rate = listener.score(made, select)["all"]["rate"] if ok else None
        rows.append({**row, "select_rate": rate, "mixed_similarity": sim, "kept_character": ok,
                     **({} if ok else {"why": "two people on the mixed line"})})
        print(f"  {json.dumps(made.made_of())}: {rate if rate is None else round(rate, 3)}, F0 {f0:.0f} Hz "
              f"({shift:+.0%}), similarity {sim}{'' if ok else '  REFUSED (two people)'}", flush=True)
    kept = [r for r in rows if r["kept_character"]]
    best = min(kept, key=lambda r: r["select_rate"], default=None)
    out = CACHE / f"search-{args.preset}-{language}.json"
    out.write_text(json.dumps({"preset": args.preset, "language": language, "own_rate": base, "own_f0": base_f0,
                               "own_similarity": base_sim, "best": best, "candidates": rows},
                              ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"best: {best}\nwrote {out}")


def machine_meta(started: float, computed: int) -> dict:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(), "loadavg_at_end": loadavg(),
            "python": platform.python_version(), "asr": asr.MODEL_ID, "beam": BEAM,
            "seconds": round(time.monotonic() - started, 1), "clips_computed": computed}


def summary(table: dict) -> dict:
    """preset -> language -> the figures the results file keeps (no transcripts)."""
    out = {}
    for preset, by_language in table.items():
        out[preset] = {lang: {"select": r["select"]["rate"], "report": r["report"]["rate"], "all": r["all"]["rate"],
                              "made_of": r["made_of"]}
                       for lang, r in by_language.items() if lang in LANGUAGES}
        out[preset]["mixed_similarity"] = by_language["mixed_similarity"]
    return out


def cmd_report(args: argparse.Namespace) -> None:
    before = json.loads(Path(args.before).read_text(encoding="utf-8"))
    after = json.loads(Path(args.after).read_text(encoding="utf-8"))
    doc = {"about": "bench/intelligibility.py: error rate per preset and language (zh toned pinyin syllables, "
                    "en words, ja kana), heard by Whisper base; 'select' half chose the recipes, 'report' half "
                    "was not seen by the choice. mixed_similarity: speaker similarity of the zh and en segments "
                    "of " + MIXED_LINE,
           "goal": GOAL, "before": summary(before["table"]), "after": summary(after["table"]),
           "measured": {"before": before["meta"], "after": after["meta"]}}
    if args.tried:
        # recipes the search chose that the report half did not confirm: measured, then not taken
        tried = summary(json.loads(Path(args.tried).read_text(encoding="utf-8"))["table"])
        doc["not_taken"] = {preset: {lang: {**tried[preset][lang], "mixed_similarity": tried[preset]["mixed_similarity"]}
                                     for lang in LANGUAGES if tried[preset][lang]["made_of"] != doc["after"][preset][lang]["made_of"]}
                            for preset in tried}
        doc["not_taken"] = {p: v for p, v in doc["not_taken"].items() if v}
    Path(args.write).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(markdown(doc))


def markdown(doc: dict) -> str:
    lines = ["| preset | zh before | zh after (report half) | en before | en after (report half) | ja before "
             "| ja after (report half) | mixed zh/en similarity before -> after |", "|---|---|---|---|---|---|---|---|"]
    for preset in doc["after"]:
        b, a = doc["before"][preset], doc["after"][preset]
        cells = [preset]
        for lang in LANGUAGES:
            cells.append(f"{b[lang]['all']:.1%}")
            cells.append(f"{a[lang]['all']:.1%} ({a[lang]['report']:.1%})")
        cells.append(f"{b['mixed_similarity']:.3f} -> {a['mixed_similarity']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def spectrogram_png(audio: np.ndarray, rate: int, path: Path, title_rows: int = 0) -> None:
    """A log-magnitude spectrogram (0-8 kHz, 10 ms hop) as a grey PNG, low frequencies at the bottom."""
    from PIL import Image

    hop, win = rate // 100, rate // 40
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(audio, (0, win)), win)[::hop] * np.hanning(win)
    spec = 20 * np.log10(np.abs(np.fft.rfft(frames, axis=1)) + 1e-6)
    spec = spec[:, : int(8000 / (rate / win))]
    top = spec.max()
    img = np.clip((spec - (top - 80)) / 80, 0, 1)
    pixels = (255 * (1 - img.T[::-1])).astype(np.uint8)
    Image.fromarray(pixels).resize((pixels.shape[1] * 2, pixels.shape[0] * 2)).save(path)


def cmd_worst(args: argparse.Namespace) -> None:
    """The sentence with the most errors in a table run: its WAV, a spectrogram and what was heard."""
    run = json.loads(Path(args.table).read_text(encoding="utf-8"))
    texts = {s["id"]: s for s in load_sentences()}
    rows = [(line["errors"] / max(line["units"], 1), preset, lang, line)
            for preset, by_language in run["table"].items() for lang in LANGUAGES
            for line in by_language[lang]["lines"]]
    rows.sort(key=lambda r: -r[0])
    listener = Listener()
    for rate, preset, lang, line in rows[: args.count]:
        s = texts[line["id"]]
        made = recipes_for(run["recipes"])[preset][lang]
        audio, sr = listener.speak(listener.pack(made), s["text"], lang)
        stem = CACHE / f"worst-{preset}-{line['id']}"
        sf.write(f"{stem}.wav", audio, sr)
        spectrogram_png(audio, sr, Path(f"{stem}.png"))
        print(f"{preset} {line['id']} {rate:.0%} ({line['errors']}/{line['units']}): said {s['text']!r}, "
              f"heard {line['heard']!r}; {stem}.wav/.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("table", help="every preset x language on every sentence")
    table.add_argument("--recipes", choices=("base", "current"), default="current",
                       help="base: each preset's own blend everywhere; current: presets.recipe()")
    table.add_argument("--preset", action="append", help="only these presets")
    table.add_argument("--out", default=str(CACHE / "current.json"))
    search = sub.add_parser("search", help="candidate recipes for one preset and language (select half)")
    search.add_argument("--preset", required=True, choices=list(presets.PRESETS))
    search.add_argument("--language", required=True, choices=LANGUAGES)
    report = sub.add_parser("report", help="results JSON + markdown table from two table runs")
    report.add_argument("--before", default=str(CACHE / "base.json"))
    report.add_argument("--after", default=str(CACHE / "current.json"))
    report.add_argument("--write", default=str(RESULTS))
    report.add_argument("--tried", help="a table run with recipes that were then not taken")
    worst = sub.add_parser("worst", help="WAV + spectrogram of the worst-read sentences of a table run")
    worst.add_argument("--table", default=str(CACHE / "current.json"))
    worst.add_argument("--count", type=int, default=3)
    args = parser.parse_args(argv)
    {"table": cmd_table, "search": cmd_search, "report": cmd_report, "worst": cmd_worst}[args.command](args)


if __name__ == "__main__":
    main()
