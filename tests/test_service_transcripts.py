"""Prompt transcripts in the service: a clone without a transcript is heard (in its job), zero-shot
only when the recognizer is sure; saved voices get theirs stored; transcription is a queued job."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cosyedge.errors import BusyError, CancelledError, ModelMissingError, ParameterError
from cosyedge.service.requests import PHASE_TRANSCRIBING, TTSRequest
from cosyedge.voices.transcripts import ZERO_SHOT_CONFIDENCE
from tests.helpers.fake_engine import FakeFactory
from tests.helpers.fake_recognizer import FakeRecognizer
from tests.helpers.waiting import wait_until
from tests.test_audio_prompt import encode, speechlike

PROMPT = encode(speechlike(4.0), 24000)


def clone(service, **fields):
    job = service.submit(TTSRequest(text="Hello.", consent=True, prompt_audio=PROMPT, **fields))
    assert job.wait(60), "job did not finish"
    return job.outcome()


def cloner(make_service, recognizer):
    factory = FakeFactory(native_clone=True)
    return make_service(factory=factory, recognizer=recognizer), factory


def test_a_clone_without_transcript_runs_zero_shot_with_what_was_heard(make_service):
    recognizer = FakeRecognizer(text="Hello from the prompt.", confidence=0.9)
    service, factory = cloner(make_service, recognizer)
    result = clone(service, language="en")
    assert factory.engine.calls[-1][1].meta["transcript"] == "Hello from the prompt."
    assert result.clone_mode == "zero_shot"
    assert result.transcript == {"text": "Hello from the prompt.", "source": "asr", "language": "en",
                                 "confidence": 0.9, "trusted": True}
    assert [n.code for n in result.notes if n.code.startswith("transcript")] == ["transcript_heard"]
    assert recognizer.calls[0][1:] == (24000, "en")
    assert result.report()["clone_mode"] == "zero_shot" and result.report()["transcript"]["source"] == "asr"


def test_an_unsure_transcript_clones_cross_lingually_and_says_why(make_service):
    recognizer = FakeRecognizer(text="hollow fram the pomp", confidence=ZERO_SHOT_CONFIDENCE - 0.2)
    service, factory = cloner(make_service, recognizer)
    result = clone(service)
    assert factory.engine.calls[-1][1].meta["transcript"] is None  # the engine clones cross-lingually
    assert result.clone_mode == "cross_lingual"
    assert result.transcript["text"] == "hollow fram the pomp" and result.transcript["trusted"] is False
    (note,) = [n for n in result.notes if n.code.startswith("transcript")]
    assert note.code == "transcript_unsure" and note.params["threshold"] == ZERO_SHOT_CONFIDENCE


def test_a_typed_transcript_is_not_heard_again(make_service):
    recognizer = FakeRecognizer()
    service, factory = cloner(make_service, recognizer)
    result = clone(service, prompt_text="What I said.")
    assert recognizer.calls == [] and result.clone_mode == "zero_shot"
    assert result.transcript["source"] == "user" and not any(n.code.startswith("transcript") for n in result.notes)


def test_the_same_prompt_is_heard_once(make_service):
    recognizer = FakeRecognizer()
    service, _ = cloner(make_service, recognizer)
    clone(service)
    clone(service)
    assert len(recognizer.calls) == 1


def test_an_engine_that_cannot_clone_never_transcribes(make_service):
    recognizer = FakeRecognizer()
    service = make_service(recognizer=recognizer)
    result = clone(service)
    assert recognizer.calls == [] and result.clone_mode is None and result.transcript is None


def test_no_recognizer_installed_clones_cross_lingually(make_service):
    service, _ = cloner(make_service, FakeRecognizer(error=ModelMissingError("the parts are missing")))
    result = clone(service)
    assert result.clone_mode == "cross_lingual"
    assert [n.code for n in result.notes if n.code.startswith("transcript")] == ["transcript_unavailable"]


def test_an_instruction_over_a_clone_reports_instruct_mode(make_service):
    service = make_service(factory=FakeFactory(native_clone=True, native_instruct=True),
                           recognizer=FakeRecognizer())
    result = clone(service, instruct="Speak slowly, like a storyteller.")
    assert result.clone_mode == "instruct"


def test_a_voice_saved_without_transcript_gets_one_in_its_record_and_export(make_service):
    import io
    import json
    import zipfile

    recognizer = FakeRecognizer(text="Good morning, class.", confidence=0.93)
    service = make_service(recognizer=recognizer)  # saved on an engine that cannot clone
    info = service.save_voice("Ms Lee", PROMPT, "", consent=True)
    wait_until(lambda: service.voice_transcript(info.id).text, timeout=30)
    stored = service.voice_transcript(info.id)
    assert (stored.text, stored.source, stored.confidence) == ("Good morning, class.", "asr", 0.93)
    with zipfile.ZipFile(io.BytesIO(service.export_voice(info.id))) as zf:
        assert zf.read("transcript.txt").decode() == "Good morning, class."
        meta = json.loads(zf.read("meta.json"))
    assert (meta["transcript_source"], meta["transcript_confidence"]) == ("asr", 0.93)
    service.delete_voice(info.id)
    again = service.import_voice(_zip(meta, "Good morning, class.")).info  # the record travels in the zip
    assert service.voice_transcript(again.id).source == "asr"


def _zip(meta, transcript):
    import io
    import json
    import zipfile

    from tests.test_audio_prompt import encode, speechlike

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("voice.wav", encode(speechlike(4.0), 24000))
        zf.writestr("transcript.txt", transcript)
        zf.writestr("meta.json", json.dumps(meta))
    return buf.getvalue()


def test_an_edited_transcript_is_trusted_and_serves_a_later_clone(make_service):
    recognizer = FakeRecognizer(text="heard badly", confidence=0.3)
    service = make_service(factory=FakeFactory(native_clone=True), recognizer=recognizer)
    info = service.save_voice("Ms Lee", PROMPT, "", consent=True)
    wait_until(lambda: service.voice_transcript(info.id).text, timeout=30)
    job = service.submit(TTSRequest(text="Hello.", voice_id=info.id))
    assert job.wait(30) and job.outcome().clone_mode == "cross_lingual"  # the stored one is unsure
    service.set_voice_transcript(info.id, "Exactly what I said.")
    assert service.voice_transcript(info.id).source == "user"
    job = service.submit(TTSRequest(text="Hello.", voice_id=info.id))
    result = job.outcome() if job.wait(30) else None
    assert result.clone_mode == "zero_shot" and result.transcript["text"] == "Exactly what I said."


def test_a_saved_voice_without_transcript_is_heard_at_its_first_clone_and_keeps_it(make_service, fake_factory):
    from cosyedge.audio import condition_prompt

    recognizer = FakeRecognizer(text="Saved on another box.", confidence=0.95)
    service = make_service(factory=FakeFactory(native_clone=True), recognizer=recognizer)
    prompt = condition_prompt(PROMPT, max_bytes=1 << 24)
    service.library.save("Mr Wang", prompt, "", engine="kokoro", model_id="kokoro-int8")  # e.g. the CLI
    job = service.submit(TTSRequest(text="Hello.", voice_id="mr-wang"))
    assert job.wait(30) and job.outcome().clone_mode == "zero_shot"
    assert service.voice_transcript("mr-wang").text == "Saved on another box."


def test_transcription_is_a_queued_job_that_can_be_cancelled(make_service):
    gate = threading.Event()
    recognizer = FakeRecognizer(gate=gate)
    service = make_service(recognizer=recognizer)
    job = service.submit_transcription(PROMPT, "en", owner="page", consent=True)
    assert recognizer.started.wait(10)
    assert job.phase == PHASE_TRANSCRIBING and service.active_jobs() == [job]
    waiting = service.submit_transcription(encode(speechlike(5.0), 24000), owner="page", consent=True)
    assert service.cancel_owner("page") == 2
    gate.set()
    assert job.wait(10) and waiting.wait(10)
    with pytest.raises(CancelledError):
        job.outcome()
    done = service.submit_transcription(PROMPT, "en", consent=True)
    assert done.wait(10) and done.outcome().text == "hello from the prompt"


def test_transcription_obeys_the_queue_limits_and_consent(make_service, web_settings):
    import dataclasses

    gate = threading.Event()
    service = make_service(dataclasses.replace(web_settings, concurrency=1, queue_size=1),
                           recognizer=FakeRecognizer(gate=gate))
    service.submit_transcription(PROMPT, consent=True)
    service.submit_transcription(PROMPT, consent=True)
    with pytest.raises(BusyError):
        service.submit_transcription(PROMPT, consent=True)
    gate.set()
    with pytest.raises(ParameterError) as refused:
        service.submit_transcription(PROMPT)
    assert refused.value.code == "consent_required"
    with pytest.raises(ParameterError):
        service.submit_transcription(PROMPT, "xx", consent=True)


def test_the_service_releases_its_recognizer_when_it_closes(make_service):
    recognizer = FakeRecognizer()
    service = make_service(recognizer=recognizer)
    assert service.submit(TTSRequest(text="Hello.")).wait(30)
    service.close()
    assert recognizer.releases >= 1


ESPEAK_LINE = "Please open your books and turn to page twelve."


def espeak_wav(text: str, voice: str = "en-us") -> bytes:
    """Real speech made here by espeak-ng (a Debian package scripts/setup.sh --dev installs)."""
    import shutil
    import subprocess

    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: apt-get install espeak-ng (scripts/setup.sh --dev does)", pytrace=False)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"  # a file: --stdout leaves the WAV's sizes unwritten
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(path), text], check=True,
                       capture_output=True, timeout=60)
        return path.read_bytes()


@pytest.mark.slow
def test_tiny_cosyvoice_clones_zero_shot_with_the_transcript_heard_offline(tiny_cosyvoice_models, tmp_path,
                                                                          monkeypatch):
    """The acceptance line: on a converted tiny CosyVoice2, a request without transcript runs
    zero-shot with the text the real recognizer heard in real speech, with every socket refused."""
    import socket

    from cosyedge.listening.asr import Recognizer
    from cosyedge.config import Settings
    from cosyedge.engines.loader import load_engine
    from cosyedge.service.facade import Service
    from tests.helpers import REPO

    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model="cosyvoice2-tiny",
                        onnx_threads=2, idle_unload_minutes=0).validate()
    encoded_with: list[str | None] = []

    def factory():
        engine = load_engine(settings)
        encode = engine.encode_prompt

        def spy(audio, sample_rate, transcript, **options):
            encoded_with.append(transcript)
            return encode(audio, sample_rate, transcript, **options)

        engine.encode_prompt = spy
        return engine

    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network use in a test that must stay offline")

    for target, name in ((socket.socket, "connect"), (socket.socket, "connect_ex"), (socket, "create_connection"),
                         (socket, "getaddrinfo")):
        monkeypatch.setattr(target, name, refuse)
    # the joined model is shared with the other real-recognizer tests (joined once per checkout)
    recognizer = Recognizer.for_models(REPO / "models", threads=2, idle_seconds=0)
    service = Service(settings, engine_factory=factory, recognizer=recognizer)
    service.start()
    try:
        job = service.submit(TTSRequest(text="Hello there. Good morning.", consent=True,
                                        prompt_audio=espeak_wav(ESPEAK_LINE), language="en"))
        assert job.wait(600), "job did not finish"
        result = job.outcome()
    finally:
        service.close()
    assert attempts == []
    heard = result.transcript
    words = heard["text"].lower()
    assert "open" in words and "page" in words, heard
    assert result.clone_mode == "zero_shot" and heard["source"] == "asr" and heard["trusted"], result.report()
    assert heard["confidence"] >= ZERO_SHOT_CONFIDENCE
    assert encoded_with == [heard["text"]]  # the engine encoded the prompt with the heard text: zero-shot
    assert result.duration > 0.05 and not recognizer.loaded  # released with the service


def test_a_warm_box_loads_the_recognizer_with_the_thermal_thread_count(make_service, web_settings):
    import dataclasses

    from cosyedge.host.thermal import ThermalSnapshot

    class Warm:
        def snapshot(self):
            return ThermalSnapshot(state="warm", temp_c=75.0, onnx_threads=1, message="warm")

    recognizer = FakeRecognizer()
    recognizer.threads = 4
    service = make_service(dataclasses.replace(web_settings, onnx_threads=4), thermal=Warm(), recognizer=recognizer)
    job = service.submit_transcription(PROMPT, consent=True)
    assert job.wait(10) and job.outcome().text
    assert recognizer.threads == 1
