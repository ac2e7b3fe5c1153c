"""What the idle app holds after lessons and voice work, and what each release gives back.

    .venv/bin/python bench/idle_memory.py                    # embedded Kokoro, the real page mounted
    .venv/bin/python bench/idle_memory.py --idle-seconds 40 --write

Issue 36: after lessons and voice work the idle app sat at 1.43 GB until the idle unload. This runs
the app in this process (the service, REST and the Gradio page built, as app.py does) on the real
embedded engine and a real offline recognizer, then: four jobs (en, zh, ja, a 1,700-character text),
a lesson of eight paragraphs with its zip, a voice saved without a transcript (heard offline) and a
job in it. It samples RSS at the start, after each part and after ``--idle-seconds`` of idle (what
the service returns by itself once its queue is idle), then releases the holders one at a time and
says what each gave back: the finished jobs' results, the heap (``malloc_trim``), the recognizer,
the engine. RSS from /proc/self/status (VmRSS) with the anonymous share from smaps_rollup.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import load_average, machine  # noqa: E402


def rss_mb() -> float:
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith("VmRSS"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def anon_mb() -> float:
    for line in open("/proc/self/smaps_rollup", encoding="ascii"):
        if line.startswith("Anonymous:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=40.0,
                        help="idle time before the releases (the service's own idle release runs in it)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-idle-release", action="store_true",
                        help="turn off the service's own release once its queue is idle (the before figure)")
    parser.add_argument("--write", action="store_true", help="print the markdown table too")
    args = parser.parse_args()

    from app import build_app
    from cosyedge import config
    from cosyedge.audio import wav_bytes
    from cosyedge.host.heap import return_large_blocks, trim_heap
    from cosyedge.service.facade import Service
    from cosyedge.service.requests import TTSRequest

    return_large_blocks()  # as app.py does at start
    started_at = time.strftime("%Y-%m-%d %H:%M")
    load_before = load_average()
    root = Path(tempfile.mkdtemp(prefix="cosyedge-idle-"))
    (root / "outputs").mkdir()
    settings = dataclasses.replace(config.from_env({}), root=root, models_dir=ROOT / "models",
                                   idle_unload_minutes=0, onnx_threads=args.threads).validate()
    service = Service(settings)
    if args.no_idle_release:
        service.queue.on_idle = None
    service.start()
    build_app(service, with_ui=True)
    rows: list[tuple[str, float, float]] = [("app started (engine not loaded)", rss_mb(), anon_mb())]

    def run(request: TTSRequest) -> object:
        job = service.submit(request)
        assert job.wait(1800), "a job took over 30 minutes"
        return job.outcome()

    long_text = " ".join(["Rivers begin high in the hills, where rain and melting snow gather into small "
                          "streams, and the streams join together as they run down to the valley."] * 10)
    for text in ("Good morning, class. Today we read about rivers.", "今天天气真好，我们去公园散步吧。",
                 "こんにちは、元気ですか。", long_text):
        run(TTSRequest(text=text))
    rows.append(("after 4 jobs (one of 1,700 characters)", rss_mb(), anon_mb()))
    paragraph = "Rivers begin high in the hills. The streams join together and grow wider. " * 6
    lesson = service.read_lesson("\n\n".join([paragraph] * 8).encode(), "rivers.txt")
    job = service.submit_lesson(lesson, TTSRequest(text=""), per_paragraph=True)
    assert job.wait(1800)
    job.outcome()
    rows.append(("after a lesson of 8 paragraphs (with its zip)", rss_mb(), anon_mb()))
    said = run(TTSRequest(text="Hello, my name is Lee and I teach music at this school every day.",
                          speaker="male_1"))
    info = service.save_voice("Ms Lee", wav_bytes(said.audio, said.sample_rate), "", consent=True)
    for active in service.active_jobs():  # its transcript, heard offline in a queued job
        active.wait(600)
    run(TTSRequest(text="Good morning, class.", voice_id=info.id))
    rows.append(("after a voice saved (heard offline) and used", rss_mb(), anon_mb()))
    time.sleep(args.idle_seconds)
    rows.append((f"idle {args.idle_seconds:g} s", rss_mb(), anon_mb()))

    def release(name: str, action) -> None:
        action()
        gc.collect()
        time.sleep(0.5)
        rows.append((name, rss_mb(), anon_mb()))

    release("+ finished jobs' results dropped", service.queue.release_results)
    release("+ heap trimmed (malloc_trim)", trim_heap)
    release("+ speech recognizer released", service.recognizer.release)
    release("+ engine unloaded (the idle unload)", service.holder.unload)
    service.close()
    report = {"machine": machine(), "date": started_at, "load_before": load_before, "load_after": load_average(),
              "rss_mb": [{"step": name, "rss": rss, "anonymous": anon} for name, rss, anon in rows]}
    print(json.dumps(report, indent=1, ensure_ascii=False))
    if args.write:
        print("\n| step | RSS (MiB) | anonymous (MiB) | change |\n|---|---|---|---|")
        previous = None
        for name, rss, anon in rows:
            change = "" if previous is None else f"{rss - previous:+.1f}"
            print(f"| {name} | {rss:.1f} | {anon:.1f} | {change} |")
            previous = rss
    return 0


if __name__ == "__main__":
    sys.exit(main())
