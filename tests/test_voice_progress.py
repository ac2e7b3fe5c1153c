"""A voice's preparation said step by step (cosyedge/service/voice_progress.py): as the job's phase
with a count and the time left once it takes about 2 s, on /jobs/{id}, and in the answer's notes
(a streamed answer's report header too); a quick one says nothing new."""

from __future__ import annotations

import io
import json

import soundfile as sf

from cosyedge.notes import code_of
from cosyedge.service.requests import PHASE_TRANSCRIBING, TTSRequest
from cosyedge.service.voice_progress import PreparationTimes, VoicePreparation


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(times: PreparationTimes, steps: list[tuple[float, str]], hearing: bool = False):
    """A preparation of ``steps`` ((seconds into it, stage) each); the phases it said and its note."""
    said: list[str] = []
    clock = Clock()
    preparation = VoicePreparation(said.append, times, "fake", len(steps), clock=clock)
    start = clock.now
    if hearing:
        preparation.phase(PHASE_TRANSCRIBING)
    for number, (at, stage) in enumerate(steps, start=1):
        clock.now = start + at
        preparation.engine_step(number, len(steps), stage)
    clock.now = start + steps[-1][0] + 1.0
    return said, preparation.finish()


def test_a_first_long_preparation_is_said_once_it_passes_two_seconds():
    said, note = run(PreparationTimes(), [(0.0, "encoders"), (1.0, "tokens"), (2.5, "mel"), (5.0, "speaker")])
    steps = [phase for phase in said if code_of(phase) == "voice_preparing"]
    assert [(s.params["step"], s.params["total"], s.params["stage"]) for s in steps] == [(3, 4, "mel"), (4, 4, "speaker")]
    assert steps[0].params["seconds_left"] == 2  # the pace so far: 2.5 s for two steps, two to go
    assert str(steps[0]) == "preparing the voice: step 3 of 4 (prompt mel), about 2 s left"
    assert note.code == "voice_prepared" and note.params == {"steps": 4, "seconds": 6.0}


def test_the_next_one_is_said_from_its_first_step_with_the_time_it_took_before():
    times = PreparationTimes()
    run(times, [(0.0, "tokens"), (2.0, "mel"), (4.0, "speaker")])
    said, _ = run(times, [(0.0, "tokens"), (1.0, "mel"), (2.0, "speaker")], hearing=True)
    hearing, *engine = [phase for phase in said if code_of(phase) == "voice_preparing"]
    assert (hearing.params["step"], hearing.params["total"], hearing.params["stage"]) == (1, 4, "hearing")
    assert [s.params["step"] for s in engine] == [2, 3, 4]
    assert engine[0].params["seconds_left"] is None or engine[0].params["seconds_left"] >= 0


def test_a_quick_preparation_says_no_steps_and_adds_no_note():
    said, note = run(PreparationTimes(), [(0.0, "tokens"), (0.3, "mel"), (0.6, "speaker")])
    assert not [phase for phase in said if code_of(phase) == "voice_preparing"] and note is None


def wav_bytes(seconds: float = 4.0) -> bytes:
    from tests.test_audio_prompt import speechlike

    buf = io.BytesIO()
    sf.write(buf, speechlike(seconds), 16000, format="WAV")
    return buf.getvalue()


def test_a_clone_on_a_slow_encoder_shows_its_steps_on_jobs_and_in_its_answer(make_service, fake_factory):
    """The fake engine's encoding takes 3 s in three steps (like CosyVoice's with its encoders open)."""
    import time

    from fastapi.testclient import TestClient

    from cosyedge.web.api import create_api

    fake_factory.engine_kwargs.update(native_clone=True, encode_delay=3.0)
    service = make_service()
    client = TestClient(create_api(service))
    job = service.submit(TTSRequest(text="Hello.", prompt_audio=wav_bytes(), prompt_text="hello", consent=True))
    seen = []
    deadline = time.monotonic() + 30
    while not job.finished and time.monotonic() < deadline:
        seen.append(client.get(f"/jobs/{job.id}").json())
        time.sleep(0.05)
    voice = [s["voice"] for s in seen if "voice" in s]
    assert voice and voice[-1] == {"step": 3, "total": 3, "stage": "speaker", "seconds_left": voice[-1]["seconds_left"]}
    assert any(s["phase"].startswith("preparing the voice: step 3 of 3 (speaker embedding)") for s in seen), seen
    prepared = [n for n in job.outcome().notes if code_of(n) == "voice_prepared"]
    assert prepared and prepared[0].params["steps"] == 3 and prepared[0].params["seconds"] >= 2.5

    # a streamed answer in a saved voice met for the first time: its report header says why it was late
    saved = service.save_voice("Ms Lee", wav_bytes(5.0), "hello there", consent=True)
    with client.stream("POST", "/v1/audio/speech", json={
            "model": "tts-1", "input": "Good morning.", "voice": saved.id, "response_format": "wav",
            "stream_format": "audio"}) as streamed:
        assert streamed.status_code == 200 and streamed.headers["x-cosyedge-streamed"] == "true"
        report = json.loads(streamed.headers["x-cosyedge-report"])
        streamed.read()
    assert any("the voice was prepared first: 3 steps" in note for note in report["notes"]), report
