"""The speed-mode check on a full-size CosyVoice2 (random weights): its time per mode, the stability of
its verdicts between runs, and the peak RSS of the process with the model and the recognizer loaded.

The model is the one ``bench/cosyvoice_first_audio.py prepare --work W`` builds (CosyVoice2-0.5B at
full size, random weights, int8 as shipped; stand-ins for campplus and the speech tokenizer; the
LLM's end-of-speech suppressed, so every line is 20 x its text tokens of speech: far longer than a
real model reads the check's short lines: with the tiny test tokenizer, 14-42 s per line). So the
check's process caps each line at ``--speech-ratio`` x its text tokens (default 2, upstream's least:
1.4-4.2 s per line, about what the real model speaks for these lines; 0 keeps upstream's 20). Its
files are linked into a folder of this bench's own
(``--work``), so the check's ``modes.json`` is written there. A saved voice (a 3.2 s tone with a
transcript: the model has no presets) is made once; then ``--runs`` times, in a fresh process each:
``python -m cosyedge models check`` with ``--lines`` lines per language, timed, its peak RSS taken
(the process's own ``VmHWM`` at its end), and its record read back. The process's RSS is also sampled
(every 50 ms) stage by stage: the load (engine, voice, judge), each mode's renders, the first line heard
(the recognizer loads), the rest of the scoring: where the peak is reached and what each stage keeps.

    flock /tmp/cosyedge-bench.lock .venv/bin/python bench/mode_check_full.py \\
        --model-dir W/models/cosyvoice2-bench --work /tmp/mode-check-full --lines 2 --runs 2
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import cpu_model, load_average  # noqa: E402

MODEL_ID = "cosyvoice2-bench"
VOICE = "bench voice"
#: The check's process: the LLM's longest answer capped at ratio x the text's tokens, then the CLI.
_CHILD = r"""
import sys
from cosyedge.engines.cosyvoice.common import llm
ratio = float(sys.argv[1])
if ratio:
    for fn in (llm.SpeechLM.generate, llm.SpeechLM.iter_tokens):
        defaults = list(fn.__defaults__)  # prompt_text_ids, prompt_speech_ids, min_ratio, max_ratio, ...
        defaults[2], defaults[3] = min(defaults[2], ratio), ratio
        fn.__defaults__ = tuple(defaults)
import json, threading, time
from cosyedge.listening import mode_scores
from cosyedge.service import mode_check
def vm(key):
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(key + ":"))) // 1024
stages, label = [], ["start: engine, voice, judge load"]
def mark(name):  # a new stage when the label changes: RSS at its start, the most seen in it, at its end
    if stages and stages[-1]["stage"] == name:
        return
    if stages:
        stages[-1]["rss_end_mb"] = vm("VmRSS")
    stages.append({"stage": name, "rss_start_mb": vm("VmRSS"), "rss_max_mb": vm("VmRSS"), "hwm_start_mb": vm("VmHWM")})
mark(label[0])
def sample():
    while True:
        stages[-1]["rss_max_mb"] = max(stages[-1]["rss_max_mb"], vm("VmRSS"))
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
def tagged(fn, name):
    def wrapper(*a, **k):
        mode = a[3] if name == "render" else None
        mark(f"render {mode}" if mode else name)
        return fn(*a, **k)
    return wrapper
mode_check._render = tagged(mode_check._render, "render")
heard = []
def hear_first(fn):  # the first line heard loads the recognizer: a stage of its own, then "scoring"
    def wrapper(*a, **k):
        mark("scoring" if heard else "scoring: the recognizer loads, first line heard")
        out = fn(*a, **k)
        heard.append(1)
        return out
    return wrapper
mode_scores.embed_line = tagged(mode_scores.embed_line, "scoring")
mode_scores.hear_line = hear_first(mode_scores.hear_line)
mode_scores.compare = tagged(mode_scores.compare, "scoring")
from cosyedge.cli import main
code = main(sys.argv[2:])
mark("end")
print("stages_json=" + json.dumps(stages), file=sys.stderr)
print(f"peak_rss_kb={vm('VmHWM') * 1024}", file=sys.stderr)
sys.exit(code)
"""
TRANSCRIPT = "Read this slowly and warmly, please."


def link_model(source: Path, models: Path) -> Path:
    """``models/<MODEL_ID>`` with every file of ``source`` linked (its modes.json is this bench's own)."""
    folder = models / MODEL_ID
    folder.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name not in ("modes.json", "thread_costs.json") and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry.resolve())
    return folder


def save_voice(work: Path) -> str:
    """A saved voice (3.2 s swelling tone, typed transcript) in ``work/prompts``; its id."""
    import soundfile as sf

    rate = 24000
    t = np.arange(int(rate * 3.2)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 170 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    path = work / "voice.wav"
    buf = io.BytesIO()
    sf.write(buf, tone.astype(np.float32), rate, format="WAV")
    path.write_bytes(buf.getvalue())
    listing = subprocess.run([sys.executable, "-m", "cosyedge", "library", "list", "--prompts-dir",
                              str(work / "prompts")], capture_output=True, text=True, cwd=REPO)
    if VOICE not in listing.stdout:
        subprocess.run([sys.executable, "-m", "cosyedge", "library", "save", VOICE, str(path), "--transcript",
                        TRANSCRIPT, "--consent", "--prompts-dir", str(work / "prompts")], check=True, cwd=REPO)
    from cosyedge.voices.library import VoiceLibrary

    return next(v.id for v in VoiceLibrary(work / "prompts" / "library").list() if v.name == VOICE)


def one_run(work: Path, voice: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-c", _CHILD, str(args.speech_ratio), "models", "check", MODEL_ID, "--voice", voice,
               "--models-dir", str(work / "models"), "--prompts-dir", str(work / "prompts"),
               "--onnx-threads", str(args.threads)]
    if args.lines:
        command += ["--lines", str(args.lines)]
    if args.languages:
        command += ["--languages", args.languages]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    seconds = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"the check failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}")
    peaks = [line.split("=", 1)[1] for line in done.stderr.splitlines() if line.startswith("peak_rss_kb=")]
    stages = [json.loads(line.split("=", 1)[1]) for line in done.stderr.splitlines()
              if line.startswith("stages_json=")]
    record = json.loads((work / "models" / MODEL_ID / "modes.json").read_text(encoding="utf-8"))
    return {"wall_s": round(seconds, 1), "peak_rss_mb": round(int(peaks[-1]) / 1024) if peaks else None,
            "stages": stages[-1] if stages else [], "record": record, "stdout": done.stdout}


def report(runs: list[dict], args: argparse.Namespace, load_before: str, load_after: str) -> str:
    first = runs[0]["record"]
    lines = [f"{cpu_model()}; {args.threads} threads; load {load_before} before, {load_after} after; "
             f"{first['lines']} lines ({', '.join(first['languages'])}); judge {first['judge']}; "
             f"speech ratio {args.speech_ratio:g}", "",
             "| run | wall | check's own | exact render (audio) | " + " | ".join(
                 f"{m} render | {m} verdict" for m in first["modes"]) + " | peak RSS |",
             "|---|---|---|---|" + "---|---|" * len(first["modes"]) + "---|"]
    for index, run in enumerate(runs, 1):
        record = run["record"]
        cells = [f"{index}", f"{run['wall_s']:.0f} s", f"{record['seconds']:.0f} s",
                 f"{record['exact']['render_seconds']:.0f} s ({record['exact']['audio_seconds']:.0f} s)"]
        for entry in record["modes"].values():
            figures, verdict = entry["figures"], entry["verdict"]
            said = "recommended" if verdict["recommended"] else "not (" + ", ".join(verdict["failed"]) + ")"
            cells += [f"{entry['render_seconds']:.0f} s",
                      f"{said}; sim {figures['similarity']:.3f}, intell. {figures['intelligibility_delta']}"]
        cells.append(f"{run['peak_rss_mb']} MB" if run["peak_rss_mb"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    for index, run in enumerate(runs, 1):  # where the memory goes: the process's RSS stage by stage
        lines += ["", f"run {index}, RSS by stage (MB; the check's stages in order; peak = the most seen in it)", "",
                  "| stage | RSS at start | peak in stage | at end | VmHWM at start |", "|---|---|---|---|---|"]
        lines += [f"| {s['stage']} | {s['rss_start_mb']} | {s['rss_max_mb']} | {s.get('rss_end_mb', '-')} | "
                  f"{s['hwm_start_mb']} |" for s in run["stages"]]
    verdicts = [{m: e["verdict"]["recommended"] for m, e in run["record"]["modes"].items()} for run in runs]
    lines += ["", f"verdicts the same in every run: {all(v == verdicts[0] for v in verdicts)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, required=True,
                        help="the converted full-size model (bench/cosyvoice_first_audio.py prepare)")
    parser.add_argument("--work", type=Path, required=True, help="this bench's folder (models/, prompts/)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lines", type=int, default=None, help="lines per language (default: all six)")
    parser.add_argument("--languages", default=None, help="e.g. zh,en (default: every one the model speaks)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--speech-ratio", type=float, default=2.0,
                        help="speech tokens per text token of each line (0: upstream's 20; see the doc)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    link_model(args.model_dir, args.work / "models")
    voice = save_voice(args.work)
    load_before = load_average()
    runs = [one_run(args.work, voice, args) for _ in range(args.runs)]
    text = report(runs, args, load_before, load_average())
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "stdout"} for r in runs],
                                         "report": text}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
