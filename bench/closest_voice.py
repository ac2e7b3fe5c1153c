"""Closest built-in voice bench: how close the chosen voice is, by a judge it was not chosen with, and
how long choosing takes.

Reference voices are made here at run time (``tests/helpers/reference_voices.py``; nothing is committed):

* held out: festival voices the rule was never tuned on (Czech dita and machac, Finnish lj and mv,
  Italian lp and pc, Catalan ona, Russian nsh: ``apt-get install festvox-czech-dita ...``), each reading
  the same English prompt text in its own voice;
* seen: the team's own test voices, on which the pitch weight was chosen (espeak-ng en-us and cmn
  variants, festival kal/ked/slt, Piper joe).

Per voice: its median F0 and the preset the rule chooses (``closest_voice.choose``), timed; then four
held-out sentences (2 en, 1 zh, 1 ja) read by every preset. The chosen voice is a preset, so its
audio is that preset's. Each preset's audio is scored against the prompt by Resemblyzer (GE2E, an
independent speaker encoder with weights in its wheel; torch, so it runs in ``.venv-ref`` in a
subprocess: never a run-time dependency) and by the project's own d-vector. "Nearest preset" = the
preset Resemblyzer scores highest for that voice (mean over the sentences), whatever its pitch. The
F0 rule is checked on the table and on the held-out audio of the chosen voice.

``speed``: the choice for a new prompt (cold: the first of a process, loading the table and the
encoder; warm: the next ones); saving a voice through the service with the model loaded (it makes
the choice then); and the first use of that saved voice against a preset through the service
(prepare + resolve + synthesis of one sentence), alternated.

    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/closest_voice.py judge [--set held|seen|all]
    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/closest_voice.py speed [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import load_average, machine  # noqa: E402

OUT = REPO / "test-artifacts" / "closest_voice"
PROMPT = ("The teacher opened the window, and the children ran outside to play in the warm afternoon sun. "
          "Everyone was happy that the long winter was finally over.")
PROMPT_ZH = "老师打开了窗户，孩子们跑到外面，在温暖的午后阳光下玩耍。大家都很高兴，漫长的冬天终于过去了。"
HELD_OUT = [("en", "My brother plays the piano every evening after dinner."),
            ("en", "The museum opens at nine and closes early on Sundays."),
            ("zh", "我们下午三点在学校门口见面。"),
            ("ja", "この本を明日までに読んでください。")]
HELD = ["festival czech_dita", "festival czech_machac", "festival suo_fi_lj_diphone", "festival hy_fi_mv_diphone",
        "festival lp_diphone", "festival pc_diphone", "festival upc_ca_ona_hts", "festival msu_ru_nsh_clunits"]
SEEN = ["espeak-ng en-us+f3", "espeak-ng en-us+f4", "espeak-ng en-us+m1", "espeak-ng en-us+m3", "espeak-ng en-us",
        "espeak-ng cmn+f4", "espeak-ng cmn+m3", "festival kal_diphone", "festival ked_diphone",
        "festival cmu_us_slt_arctic_hts", "piper en_US-joe-medium"]
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
    wav, sr = sf.read(path, dtype="float32")
    if wav.ndim > 1:
        wav = wav[:, 0]
    wav = normalize_volume(librosa.resample(wav, orig_sr=sr, target_sr=sampling_rate), audio_norm_target_dBFS,
                           increase_only=True)
    out[path] = enc.embed_utterance(wav).tolist()
print(json.dumps(out))
'''


def resemblyzer(paths: list[Path]) -> dict[str, np.ndarray]:
    done = subprocess.run([str(REPO / ".venv-ref" / "bin" / "python"), "-c", RESEMBLYZER, *map(str, paths)],
                          capture_output=True, text=True, timeout=1800, check=True)
    return {k: np.asarray(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def engine_():
    from cosyedge import config
    from cosyedge.engines.loader import load_engine

    return load_engine(config.from_env({}, models_dir=REPO / "models", onnx_threads=2))


def judge(sources: list[str]) -> dict:
    from cosyedge.audio import condition_prompt
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.kokoro import closest_voice
    from cosyedge.listening.pitch import median_f0
    from cosyedge.listening.speaker import shared_encoder
    from tests.helpers import reference_voices

    OUT.mkdir(parents=True, exist_ok=True)
    engine = engine_()
    table = closest_voice.voice_table(engine)
    f0_table = {v.name: v.f0_hz for v in table}
    enc = shared_encoder()
    preset_audio: dict[str, list[Path]] = {}
    spoken_f0 = {}
    for preset in engine.presets():
        paths, pieces = [], []
        for i, (language, text) in enumerate(HELD_OUT):
            audio = np.concatenate([c.audio for c in engine.synthesize(text, preset, SynthesisOptions(language=language))])
            path = OUT / f"preset-{preset}-{i}.wav"
            sf.write(path, audio, 24000)
            paths.append(path)
            pieces.append(audio)
        preset_audio[preset] = paths
        spoken_f0[preset] = median_f0(np.concatenate(pieces), 24000)
    preset_dvec = {p: [enc.embed(sf.read(a, dtype="float32")[0], 24000) for a in paths]
                   for p, paths in preset_audio.items()}
    rows, prompts = [], {}
    for source in sources:
        zh = "cmn" in source
        path = reference_voices.make(source, PROMPT_ZH if zh else PROMPT, OUT / f"ref-{source.replace(' ', '_')}.wav")
        if path is None:
            print(f"skipped {source}: its tool or voice is not installed", flush=True)
            continue
        prompt = condition_prompt(path.read_bytes(), max_bytes=20 << 20, filename=path.name)
        conditioned = OUT / f"prompt-{source.replace(' ', '_')}.wav"
        sf.write(conditioned, prompt.pcm, prompt.sample_rate)
        started = time.perf_counter()
        embedding = enc.embed(prompt.pcm, prompt.sample_rate)
        f0 = median_f0(prompt.pcm, prompt.sample_rate)
        choice = closest_voice.choose(table, embedding, f0)
        seconds = time.perf_counter() - started
        dvec = {p: float(np.mean([cos(embedding, e) for e in preset_dvec[p]])) for p in preset_audio}
        prompts[source] = conditioned
        rows.append({"source": source, "prompt_s": round(prompt.duration_s, 1), "f0": round(f0, 1),
                     "chosen": choice.voice, "rule": choice.rule, "choice_s": round(seconds, 3), "dvector": dvec,
                     "table_f0": f0_table[choice.voice], "spoken_f0": round(spoken_f0[choice.voice], 1),
                     "load": load_average()})
        print(source, choice, round(seconds, 3), flush=True)
    engine.close()
    embeddings = resemblyzer([*prompts.values(), *(p for paths in preset_audio.values() for p in paths)])
    for row in rows:
        ref = embeddings[str(prompts[row["source"]])]
        row["resemblyzer"] = {p: float(np.mean([cos(ref, embeddings[str(a)]) for a in paths]))
                              for p, paths in preset_audio.items()}
        nearest = max(row["resemblyzer"], key=row["resemblyzer"].get)
        row["nearest"] = nearest
        row["gain"] = row["resemblyzer"][row["chosen"]] - row["resemblyzer"][nearest]
        in_band = [p for p in row["resemblyzer"] if closest_voice.qualifies(row["f0"], f0_table[p])]
        row["nearest_in_band"] = max(in_band, key=row["resemblyzer"].get) if in_band else nearest
        row["rule_table"] = closest_voice.qualifies(row["f0"], row["table_f0"])
        row["rule_spoken"] = closest_voice.qualifies(row["f0"], row["spoken_f0"])
    return {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}


def markdown(result: dict, title: str) -> str:
    lines = [f"{title} (Resemblyzer / our d-vector, mean over the 4 held-out sentences):", "",
             "| voice | F0 Hz | chosen (table F0, spoken F0) | F0 rule | nearest preset by Resemblyzer (within the F0 rule) | "
             "Resemblyzer chosen / nearest | gain | d-vector chosen | choice ms |", "|---|---|---|---|---|---|---|---|---|"]
    gains = []
    for r in result["rows"]:
        rz = r["resemblyzer"]
        gains.append(r["gain"])
        rule = "holds" if r["rule_table"] and r["rule_spoken"] else "**broken**"
        band = r.get("nearest_in_band", r["nearest"])
        lines.append(f"| {r['source']} | {r['f0']:.0f} | {r['chosen']} ({r['table_f0']:.0f}, {r['spoken_f0']:.0f}) | "
                     f"{rule} | {r['nearest']} ({band}) | {rz[r['chosen']]:.3f} / {rz[r['nearest']]:.3f} | {r['gain']:+.3f} | "
                     f"{r['dvector'][r['chosen']]:.3f} | {1000 * r['choice_s']:.0f} |")
    if gains:
        banded = [r["resemblyzer"][r["chosen"]] - r["resemblyzer"][r.get("nearest_in_band", r["nearest"])]
                  for r in result["rows"]]
        lines += ["", f"Against the nearest preset within the F0 rule: mean {np.mean(banded):+.3f} (min {min(banded):+.3f}, "
                  f"{sum(g >= 0 for g in banded)} of {len(banded)} at least as close)."]
        lines += ["", f"Mean gain over the nearest preset by Resemblyzer: {np.mean(gains):+.3f} (min {min(gains):+.3f}; "
                  f"the chosen voice is that preset for {sum(g == 0 for g in gains)} of {len(gains)} voices); the F0 "
                  f"rule holds for {sum(r['rule_table'] and r['rule_spoken'] for r in result['rows'])} of {len(gains)}."]
    return "\n".join(lines)


def speed(reps: int) -> dict:
    """Cold and warm choice for a new prompt; first use of a saved voice against a preset, alternated."""
    from cosyedge.audio import condition_prompt
    from cosyedge.config import Settings
    from cosyedge.engines.kokoro import closest_voice
    from cosyedge.service.facade import Service
    from cosyedge.service.requests import TTSRequest
    from cosyedge.service.synthesis import synthesize
    from tests.helpers import reference_voices
    from tests.helpers.shared_engine import SharedEngine

    out: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "load_before": load_average()}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        takes = [reference_voices.make(source, PROMPT, folder / f"{i}.wav")
                 for i, source in enumerate(["festival kal_diphone", "espeak-ng en-us+f3", "piper en_US-joe-medium",
                                             "festival cmu_us_slt_arctic_hts", "espeak-ng en-us+m3"])]
        prompts = [condition_prompt(p.read_bytes(), max_bytes=20 << 20) for p in takes if p is not None]
        engine = engine_()
        started = time.perf_counter()
        closest_voice.closest_voice(engine, prompts[0].pcm, prompts[0].sample_rate)
        out["cold_choice_s"] = round(time.perf_counter() - started, 3)  # table file + speaker encoder loaded
        warm = []
        for prompt in prompts[1:] * max(1, reps // max(1, len(prompts) - 1)):
            started = time.perf_counter()
            closest_voice.closest_voice(engine, prompt.pcm, prompt.sample_rate)
            warm.append(time.perf_counter() - started)
        out["warm_choice_s"] = [round(x, 3) for x in warm]

        saved_times, preset_times, save_times = [], [], []
        text = "Please take out your notebooks and turn to page twelve."
        for rep in range(reps):
            root = folder / f"service-{rep}"
            settings = Settings(root=root, models_dir=REPO / "models", idle_unload_minutes=0).validate()
            service = Service(settings, engine_factory=lambda: SharedEngine(engine))
            try:
                with service.holder.use():
                    pass  # the model is loaded, as on a box in use
                started = time.perf_counter()
                voice = service.save_voice(f"Voice {rep}", takes[rep % len(prompts)].read_bytes(), "hello",
                                           consent=True)
                save_times.append(time.perf_counter() - started)
                for kind in (("saved", "preset") if rep % 2 == 0 else ("preset", "saved")):
                    request = (TTSRequest(text=text, voice_id=voice.id, language="en") if kind == "saved"
                               else TTSRequest(text=text, speaker="female_2", language="en"))
                    started = time.perf_counter()
                    prepared = service.prepare(request)
                    with service.holder.use() as held:
                        resolved = service.resolve(held, prepared)
                        synthesize(held, resolved.analysis, resolved.choice.voice, resolved.options, 5000)
                    (saved_times if kind == "saved" else preset_times).append(time.perf_counter() - started)
            finally:
                service.close()
        out["save_s"] = [round(x, 3) for x in save_times]
        out["first_use_saved_s"] = [round(x, 3) for x in saved_times]
        out["preset_s"] = [round(x, 3) for x in preset_times]
        engine.close()
    out["load_after"] = load_average()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    j = sub.add_parser("judge")
    j.add_argument("--set", choices=("held", "seen", "all"), default="held")
    sub.add_parser("report", help="the judge's tables again from test-artifacts/closest_voice/judge-*.json")
    s = sub.add_parser("speed")
    s.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.what == "report":
        for path in sorted(OUT.glob("judge-*.json")):
            result = json.loads(path.read_text())
            print(markdown(result, f"{path.stem[6:]} voices, {result['date']}, {result['machine']}") + "\n")
        return 0
    if args.what == "judge":
        sets = {"held": {"held": HELD}, "seen": {"seen": SEEN}, "all": {"held": HELD, "seen": SEEN}}[args.set]
        for name, sources in sets.items():
            result = judge(sources)
            (OUT / f"judge-{name}.json").write_text(json.dumps(result, indent=1))
            print(markdown(result, f"{name} voices, {result['date']}, {result['machine']}"))
    else:
        result = speed(args.reps)
        (OUT / "speed.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
