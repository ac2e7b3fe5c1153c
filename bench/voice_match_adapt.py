"""Voice-match adaptation bench (issue 25): best preset vs style search vs search + adaptation.

Per reference voice (made at run time by festival, Piper joe-medium and espeak-ng, as in
``bench/voice_match.py``, plus espeak-ng Mandarin; none is in the bundled packs), on held-out
sentences that neither the search, the adaptation tuning nor the final choice heard:

- similarity to the prompt by the project's d-vector (``cosyedge.listening.speaker``) and by an independent
  encoder, Resemblyzer (GE2E, weights shipped on PyPI; needs torch, so it runs in ``.venv-ref`` in a
  subprocess: never a run-time dependency), for the best of the five presets (by each judge, per
  sentence), the style search alone, the kept voice, and the search with its best adaptation forced;
- intelligibility (``cosyedge.listening.intelligibility.check_voice``, zh/en/ja guard lines, our own
  ``asr.Recognizer``) of the search alone and of the kept voice;
- speed: what the adaptation adds to synthesizing a long text, and what the final choice adds to
  encoding a voice.

Steps (each under ``flock /work/locks/heavy``; results in test-artifacts/voice_match_adapt/):

    .venv/bin/python bench/voice_match_adapt.py run --voices "festival kal_diphone" "espeak-ng cmn+m3"
    .venv/bin/python bench/voice_match_adapt.py report [--write]   # --write: a round in docs/bench-log/asr-and-voices.md
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench.common import LOG_DIR, add_write_option, cpu_flags, cpu_model, record_round  # noqa: E402

#: Where ``report --write`` records a round, and the rows of docs/benchmarks.md a round may change.
LAB_LOG = LOG_DIR / "asr-and-voices.md"
CURRENT_ROWS = "'Voices and listening' table: the three 'adaptation' rows"

OUT = REPO / "test-artifacts" / "voice_match_adapt"
PROMPTS = {"en": ("The teacher opened the window, and the children ran outside to play in the warm "
                  "afternoon sun. Everyone was happy that the long winter was finally over."),
           "zh": "老师打开了窗户，孩子们跑到外面，在温暖的午后阳光下玩耍。大家都很高兴，漫长的冬天终于过去了。"}
HELD_OUT = [("en", "My brother plays the piano every evening after dinner."),
            ("en", "The museum opens at nine and closes early on Sundays."),
            ("ja", "この本を明日までに読んでください。"),
            ("zh", "我们下午三点在学校门口见面。")]
LONG_TEXT = ("The river runs past the old mill. Children fish there in the summer, and in the winter the "
             "water freezes. Our teacher told us the mill is two hundred years old. Next week we will "
             "visit it with our class, and everyone will write a short report about what they saw.")
RESEMBLYZER = '''
import json, sys, types
sys.modules.setdefault("webrtcvad", types.ModuleType("webrtcvad"))  # only its VAD trim needs it; unused
import numpy as np, soundfile as sf, librosa
from resemblyzer import VoiceEncoder
from resemblyzer.audio import normalize_volume
from resemblyzer.hparams import audio_norm_target_dBFS, sampling_rate
enc = VoiceEncoder("cpu", verbose=False)
out = {}
for path in sys.argv[1:]:
    wav, sr = sf.read(path, dtype="float32")  # its own preprocess_wav less the VAD trim: edges are trimmed
    wav = normalize_volume(librosa.resample(wav, orig_sr=sr, target_sr=sampling_rate), audio_norm_target_dBFS,
                           increase_only=True)
    out[path] = enc.embed_utterance(wav).tolist()
print(json.dumps(out))
'''


def references(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (wav, prompt language); sources whose tool is missing are left out."""
    import voice_match as vm

    refs: dict[str, tuple[Path, str]] = {}
    for voice in vm.FESTIVAL:
        path = vm.festival_voice(voice, PROMPTS["en"], folder / f"festival-{voice}.wav")
        if path and path.exists():
            refs[f"festival {voice}"] = (path, "en")
    path = vm.piper_joe(PROMPTS["en"], folder / "piper-joe.wav")
    if path:
        refs["piper en_US-joe-medium"] = (path, "en")
    for voice in vm.ESPEAK:
        path = vm.espeak_voice(voice, PROMPTS["en"], folder / f"espeak-{voice}.wav")
        if path:
            refs[f"espeak-ng {voice}"] = (path, "en")
    for voice in ("cmn+m3", "cmn+f4"):
        path = vm.espeak_voice(voice, PROMPTS["zh"], folder / f"espeak-{voice}.wav")
        if path:
            refs[f"espeak-ng {voice}"] = (path, "zh")
    return refs


def resemblyzer_embed(paths: list[Path]) -> dict[str, np.ndarray]:
    py = REPO / ".venv-ref" / "bin" / "python"
    done = subprocess.run([str(py), "-c", RESEMBLYZER, *map(str, paths)], capture_output=True, text=True,
                          timeout=600, check=True)
    return {k: np.asarray(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def speak(engine, text: str, voice, language: str) -> np.ndarray:
    from cosyedge.engines.base import SynthesisOptions

    return np.concatenate([c.audio for c in engine.synthesize(text, voice, SynthesisOptions(language=language))])


def run_voice(engine, recognizer, name: str, path: Path, folder: Path, evals: int) -> dict:
    from cosyedge.listening import intelligibility
    from cosyedge.audio import condition_prompt
    from cosyedge.engines.kokoro import voice_match
    from cosyedge.listening.speaker import cosine, shared_encoder

    enc = shared_encoder()
    prompt = condition_prompt(path.read_bytes(), max_bytes=20 << 20, filename=path.name)
    t0 = time.perf_counter()
    final = voice_match.match_voice(engine, prompt.pcm, prompt.sample_rate, None,
                                    budget=voice_match.MatchBudget(max_evals=evals, deadline_s=1e9))
    t_match = time.perf_counter() - t0

    def transcribe(audio, rate, language):
        return recognizer.transcribe(audio, rate, language)

    def reading(voice) -> dict:
        return intelligibility.check_voice(lambda text, lang: (speak(engine, text, voice, lang), 24000),
                                           transcribe=transcribe)

    search = voice_match.without_adaptation(final, "bench")
    search.meta.pop("preset_voice", None)
    search.meta["stages"] = {**search.meta["stages"], "kept": "search"}
    search.arrays["style"] = voice_match.blend_pack(
        [engine.packs[n] for n in sorted(engine.packs)],
        np.array([final.meta["timbre_weights"][n] for n in sorted(engine.packs)]),
        np.array([final.meta["prosody_weights"][n] for n in sorted(engine.packs)]))
    t0 = time.perf_counter()
    errors = {"search": reading(search), "kept": reading(final)}
    final = voice_match.guard_reading(_Checked(errors, reading), _with_errors(final, errors["kept"]))
    t_guard = time.perf_counter() - t0
    errors["kept"] = final.meta["reading_errors"]  # the unadapted figures when the guard dropped it
    tried = final.meta["stages"].get("adapted") or []
    voices = {p: p for p in engine.presets()}
    voices["search"] = search
    voices["kept"] = final
    for variant in tried:  # each method's best variant on the voice kept without it: which method carries over
        one = voice_match.without_adaptation(final, "bench")  # the fallback: best preset or search
        one.meta["adaptation"] = {k: v for k, v in variant.items() if "similarity" not in k}
        voices[f"forced_{variant['method']}"] = one
    wavs: dict[tuple[str, int], Path] = {}
    for i, (language, text) in enumerate(HELD_OUT):
        for key, voice in voices.items():
            out = folder / f"{name.replace(' ', '_')}-{key}-{i}.wav"
            sf.write(out, speak(engine, text, voice, language), 24000)
            wavs[(key, i)] = out
    ref_path = folder / f"{name.replace(' ', '_')}-prompt.wav"
    sf.write(ref_path, prompt.pcm, prompt.sample_rate)
    keep = OUT / "wav"  # the first held-out sentence of every stage, for listening and spectrograms
    keep.mkdir(parents=True, exist_ok=True)
    for source in [ref_path, *(w for (key, i), w in wavs.items() if i == 0)]:
        shutil.copy(source, keep / source.name)
    indep = resemblyzer_embed([ref_path, *wavs.values()])
    target = {"dvector": enc.embed(prompt.pcm, prompt.sample_rate), "resemblyzer": indep[str(ref_path)]}
    scores: dict[str, dict[str, float]] = {}
    for judge in target:
        stages = ["best_preset", *[k for k in voices if k not in engine.presets()]]
        per: dict[str, list[float]] = {k: [] for k in stages}
        for i in range(len(HELD_OUT)):
            def sim(key):
                p = wavs[(key, i)]
                emb = indep[str(p)] if judge == "resemblyzer" else enc.embed(sf.read(p, dtype="float32")[0], 24000)
                return cosine(target[judge], emb)
            per["best_preset"].append(max(sim(p) for p in engine.presets()))
            for key in per:
                if key != "best_preset":
                    per[key].append(sim(key))
        scores[judge] = {k: round(float(np.mean(v)), 4) for k, v in per.items()}
    return {"name": name, "prompt_s": round(prompt.duration_s, 2), "match_s": round(t_match, 2),
            "final_choice_s": final.meta["stages"].get("seconds"), "guard_s": round(t_guard, 2),
            "stages": final.meta["stages"], "adaptation": final.meta.get("adaptation"),
            "kept": final.meta["stages"]["kept"], "scores": scores, "reading_errors": errors,
            "load": os.getloadavg()[0]}


class _Checked:
    """The engine as ``guard_reading`` sees it, answering with the bench's own listening figures."""

    def __init__(self, errors: dict, reading) -> None:
        self.errors, self.reading = errors, reading

    def reading_errors(self, voice, cancelled=None) -> dict:
        if voice.meta.get("preset_voice"):  # the guard fell back to the preset: hear it
            self.errors["preset"] = self.reading(voice)
            return self.errors["preset"]
        return self.errors["search"]


def _with_errors(prompt, errors):
    prompt.meta["reading_errors"] = errors
    return prompt


def cmd_run(args) -> int:
    from cosyedge import config
    from cosyedge.listening import asr
    from cosyedge.engines.loader import load_engine

    OUT.mkdir(parents=True, exist_ok=True)
    engine = load_engine(config.from_env())
    recognizer = asr.Recognizer(threads=2, idle_seconds=0)
    with tempfile.TemporaryDirectory() as tmp:
        refs = references(Path(tmp))
        print("references:", ", ".join(refs), flush=True)
        for name in args.voices or list(refs):
            if name not in refs:
                print(f"skipped {name}: not made here", flush=True)
                continue
            load = os.getloadavg()[0]
            row = run_voice(engine, recognizer, name, refs[name][0], Path(tmp), args.evals)
            row["load_before"] = load
            row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            (OUT / f"{name.replace(' ', '_')}.json").write_text(json.dumps(row, indent=1, ensure_ascii=False))
            print(json.dumps({k: row[k] for k in ("name", "kept", "scores", "reading_errors",
                                                  "match_s", "final_choice_s")}, ensure_ascii=False), flush=True)
    return 0


def cmd_speed(args) -> int:
    """What the adaptation adds to synthesis: a long English text with a preset's style, plain and
    adapted by each method, alternated, best of ``--reps``."""
    from cosyedge import config
    from cosyedge.engines.base import VoicePrompt
    from cosyedge.engines.kokoro import adapt
    from cosyedge.engines.loader import load_engine

    OUT.mkdir(parents=True, exist_ok=True)
    engine = load_engine(config.from_env())
    style = engine.style_pack("male_1", "en")
    load = os.getloadavg()[0]
    plain = VoicePrompt(engine="kokoro", model_id=engine.model_id, arrays={"style": style}, meta={})
    speak(engine, "Warm up.", plain, "en")
    times: dict[str, list[float]] = {"plain": [], **{m: [] for m in adapt.METHODS}}
    audio_s = 0.0
    for _ in range(args.reps):
        for key in times:
            voice = plain if key == "plain" else VoicePrompt(
                engine="kokoro", model_id=engine.model_id, arrays={"style": style},
                meta={"adaptation": adapt.Adaptation(warp=1.08, f0_range=1.2, f0_center_hz=110.0,
                                                     method=key).to_meta()})
            t0 = time.perf_counter()
            audio_s = speak(engine, LONG_TEXT, voice, "en").size / 24000
            times[key].append(time.perf_counter() - t0)
    row = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load,
           "load_after": os.getloadavg()[0], "audio_s": round(audio_s, 2),
           **{k: round(min(v), 3) for k, v in times.items()}}
    (OUT / "speed.json.txt").write_text(json.dumps(row))
    print(json.dumps(row))
    return 0


def cmd_report(args) -> int:
    from cosyedge.engines.kokoro import adapt

    rows = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]
    if not rows:
        print("no results yet: run first")
        return 1
    cpu, flags = cpu_model(), cpu_flags(("avx512_vnni", "amx_int8"))
    cols = ("best_preset", "search", "kept", "forced_stft", "forced_world")
    lines = [f"Machine: {cpu} ({', '.join(flags) or 'no avx512_vnni/amx'}), {os.cpu_count()} cores; runs "
             f"{', '.join(sorted({r['date'] for r in rows}))}; command `flock /work/locks/heavy .venv/bin/python "
             "bench/voice_match_adapt.py run --voices ...` (a few voices per lock hold), then `report "
             "--write`; the load average at each voice's start is in the table (the box is shared by four "
             "engineers: timings are not an idle box's).", "",
             "Similarity to the prompt on four held-out sentences (2 en, 1 ja, 1 zh) that the search, the "
             "adaptation tuning and the final choice never heard, mean of the four. preset = the best of the five "
             "presets per sentence by the same judge (an upper bound for any one preset); search = the style "
             "search alone; kept = the voice the final choice kept; stft / world = the search with that method's "
             "best variant (tuned on the search's probe audio) applied to the voice kept without an adaptation (the "
             "best preset where it beat the search on the check lines, else the search), even where it was not "
             "kept ('-': no variant of that method beat the plain probe). "
             "d-vector = `cosyedge.listening.speaker` (the search's own judge); Resemblyzer = an independent GE2E encoder "
             "(bench only). Errors = the listening check (`intelligibility.check_voice`, one guard line each, "
             "Whisper base) of the search alone -> the kept voice.", "",
             "| reference | load | kept | adaptation kept | d-vector preset / search / kept / stft / world | "
             "Resemblyzer preset / search / kept / stft / world | errors zh, en, ja: search -> kept |",
             "|---|---|---|---|---|---|---|"]
    gains = {"dvector": [], "resemblyzer": []}
    search_gains = {"dvector": [], "resemblyzer": []}
    for r in rows:
        kept_adapt = r.get("adaptation")
        desc = adapt.Adaptation.from_meta(kept_adapt).describe() if kept_adapt else "-"
        cells = []
        for judge in ("dvector", "resemblyzer"):
            sc = r["scores"][judge]
            cells.append(" / ".join(f"{sc[k]:.3f}" if k in sc else "-" for k in cols))
            gains[judge].append(sc["kept"] - sc["best_preset"])
            search_gains[judge].append(sc["search"] - sc["best_preset"])
        err = r["reading_errors"]
        e = ", ".join(f"{err['search'].get(lang, float('nan')):.0%} -> {err['kept'].get(lang, float('nan')):.0%}"
                      for lang in ("zh", "en", "ja"))
        lines.append(f"| {r['name']} | {r['load_before']:.1f} | {r['kept']} | {desc} | {cells[0]} | {cells[1]} | {e} |")
    lines += ["", "Mean gain over the best preset, search alone -> kept voice: d-vector "
              f"{np.mean(search_gains['dvector']):+.3f} -> **{np.mean(gains['dvector']):+.3f}**, Resemblyzer "
              f"{np.mean(search_gains['resemblyzer']):+.3f} -> **{np.mean(gains['resemblyzer']):+.3f}** "
              "(goal +0.15 by the independent encoder)."]
    speed_file = OUT / "speed.json.txt"
    if speed_file.exists():
        sp = json.loads(speed_file.read_text())
        lines += ["", f"Speed ({sp['date']}, load {sp['load_before']:.1f} before / {sp['load_after']:.1f} after, command "
                  "`.venv/bin/python bench/voice_match_adapt.py speed --reps 3`): a long English text "
                  f"({sp['audio_s']:.1f} s of audio) with one style, plain and adapted, alternated, best of 3: plain "
                  f"{sp['plain']:.2f} s, STFT warp {sp['stft']:.2f} s ({sp['stft'] / sp['plain'] - 1:+.0%}), WORLD "
                  f"{sp['world']:.2f} s ({sp['world'] / sp['plain'] - 1:+.0%})."]
    lines += ["", "Encoding a new voice (12 probes, no deadline): match "
              + ", ".join(f"{r['match_s']:.0f} s (final choice {r['final_choice_s']:.1f} s)" for r in rows)
              + ". The final choice is the check lines with the search result (2 Kokoro calls), the tuning "
              "(STFT warps and WORLD variants on the probe audio, embeddings) and the check-line embeddings of "
              "the variants; the presets' check lines come from the stored probe table. An adapted voice is "
              "listened to twice by the guard (with and without the adaptation)."]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        record_round(args.write, "Voice match adaptation (issue 25)", "report", dt.datetime.now(dt.timezone.utc),
                     section, CURRENT_ROWS)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--voices", nargs="*", help="reference names (default: all)")
    run.add_argument("--evals", type=int, default=12)
    speed = sub.add_parser("speed")
    speed.add_argument("--reps", type=int, default=3)
    report = sub.add_parser("report")
    add_write_option(report, LAB_LOG, "--write-docs")
    args = parser.parse_args()
    return {"run": cmd_run, "speed": cmd_speed, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
