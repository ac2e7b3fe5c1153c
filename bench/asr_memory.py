"""Peak memory with the speech recognizer loaded plus two jobs running (issue 22 goal: under 2.0 GB).

One process, one :class:`~cosyedge.service.facade.Service` on the embedded engine (the default model) with
its own recognizer, as the app runs them. Steps, with the process's RSS sampled every 20 ms:

1. the engine loaded by a first short job (the baseline);
2. a prompt heard by a queued transcription job (the recognizer loads: its own share of memory);
3. two long syntheses queued at once (both run: concurrency 2), while a third transcription job
   waits and then runs next to them, the recognizer still loaded;
4. the recognizer released (what its idle release gives back).

Peak RSS is the kernel's high-water mark (VmHWM), the samples give each step's peak.

    flock /work/locks/heavy .venv/bin/python bench/asr_memory.py [--out test-artifacts/asr/memory.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_model, loadavg  # noqa: E402

from cosyedge import config  # noqa: E402
from cosyedge.service.facade import Service  # noqa: E402
from cosyedge.service.requests import TTSRequest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: Two long texts, as a lesson paragraph or a long REST request (about 1,000 characters each).
TEXTS = (" ".join(["The children opened their books and read the story of the little fox who lived "
                   "at the edge of the forest, and every evening he watched the lights of the village."] * 6),
         "".join(["小狐狸住在森林的边上，每天傍晚它都看着村子里的灯光一盏一盏地亮起来，心里想着明天要去哪里玩。"] * 12))


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class Sampler:
    """RSS every ``interval`` seconds on a daemon thread; ``peak_since(mark)`` per step."""

    def __init__(self, interval: float = 0.02) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append((time.monotonic(), status_kb("VmRSS")))

    def peak_since(self, mark: float) -> float:
        return max((kb for t, kb in self.samples if t >= mark), default=status_kb("VmRSS")) / 1024

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1)


def speech_prompt(service: Service) -> bytes:
    """A spoken prompt made by the engine itself (4-6 s), as WAV bytes."""
    import io

    import soundfile as sf

    job = service.submit(TTSRequest(text="Please open your books and turn to page twelve, we will read together.",
                                    language="en"))
    assert job.wait(300), "prompt job did not finish"
    result = job.outcome()
    buf = io.BytesIO()
    sf.write(buf, result.audio, result.sample_rate, format="WAV")
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "test-artifacts" / "asr" / "memory.json")
    args = parser.parse_args()
    load = loadavg()
    settings = config.from_env({}, models_dir=REPO / "models", idle_unload_minutes=0, asr_idle_seconds=0,
                               root=REPO / "test-artifacts" / "asr" / "memory-root").validate()
    settings.outputs_path.mkdir(parents=True, exist_ok=True)
    service = Service(settings)
    service.start()
    sampler = Sampler()
    figures: dict[str, float] = {"start_mb": status_kb("VmRSS") / 1024}
    try:
        mark = time.monotonic()
        prompt = speech_prompt(service)  # also loads the engine
        figures["engine_loaded_mb"] = status_kb("VmRSS") / 1024
        figures["engine_peak_mb"] = sampler.peak_since(mark)

        mark = time.monotonic()
        job = service.submit_transcription(prompt, "en", consent=True)
        assert job.wait(300)
        heard = job.outcome()
        figures["asr_loaded_mb"] = status_kb("VmRSS") / 1024
        figures["asr_step_peak_mb"] = sampler.peak_since(mark)
        assert service.recognizer.loaded

        mark = time.monotonic()
        jobs = [service.submit(TTSRequest(text=text)) for text in TEXTS]
        both_running = time.monotonic()
        while service.queue.stats().running < 2 and time.monotonic() - both_running < 30:
            time.sleep(0.01)
        running_together = service.queue.stats().running
        listening = service.submit_transcription(prompt, "en", consent=True)
        for each in (*jobs, listening):
            assert each.wait(900), "job did not finish"
            each.outcome()
        figures["two_jobs_step_peak_mb"] = sampler.peak_since(mark)
        figures["jobs_running_together"] = running_together
        figures["two_jobs_audio_s"] = round(sum(j.outcome().duration for j in jobs), 1)
        figures["two_jobs_seconds"] = round(time.monotonic() - mark, 1)

        service.recognizer.release()
        from cosyedge.service.engine_holder import release_memory

        release_memory()
        figures["asr_released_mb"] = status_kb("VmRSS") / 1024
    finally:
        sampler.stop()
        service.close()
    figures["peak_rss_mb"] = status_kb("VmHWM") / 1024
    figures = {k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": load,
              "machine": cpu_model(), "threads": settings.threads, "heard": heard.as_dict(),
              "goal_mb": 2000, **figures}
    print(json.dumps(report, ensure_ascii=False, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
