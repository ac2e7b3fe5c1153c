"""Service: checks (prepare), honest reports, lazy load, idle unload, outputs and in-use paths."""

from __future__ import annotations

import dataclasses
import gc
import io
import time
import weakref

import numpy as np
import pytest
import soundfile as sf

from cosyedge.errors import (AudioError, CancelledError, ModelMissingError, NotFoundError,
                             ParameterError, PayloadTooLargeError, TextError)
from cosyedge.engines.base import SynthesisOptions, VoicePrompt
from cosyedge.service.facade import Service
from cosyedge.service.requests import PHASE_PREPARING_VOICE, SEED_PRESETS, TTSRequest
from tests.helpers.request_path import record_request_path


def wav_file(seconds: float = 1.0, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    sf.write(buf, 0.2 * np.sin(2 * np.pi * 200 * t), rate, format="WAV")
    return buf.getvalue()


def run(service: Service, timeout: float = 10, **fields):
    job = service.submit(TTSRequest(**fields))
    assert job.wait(timeout), "job did not finish"
    return job.outcome()


def test_nothing_loads_until_the_first_job(make_service, fake_factory):
    service = make_service()
    assert fake_factory.loads == 0
    assert service.status().model_state != "loaded"
    assert service.presets() == list(SEED_PRESETS)
    result = run(service, text="Hello there. Second sentence!")
    assert fake_factory.loads == 1 and service.holder.loaded
    assert result.sentences == 2 and result.sample_rate == 24000
    assert result.duration == pytest.approx(len(result.audio) / 24000)
    assert result.voice == "female_1" and result.voice_match == "preset"
    run(service, text="Again.", speaker="male_2")
    assert fake_factory.loads == 1  # reused, not reloaded


def test_idle_unload_releases_and_next_job_reloads(make_service, web_settings, fake_factory):
    fake_factory.engine_kwargs["ballast_mb"] = 8
    settings = dataclasses.replace(web_settings, idle_unload_minutes=0.3 / 60)  # 0.3 s
    service = make_service(settings)
    run(service, text="Load me.")
    engine_ref = weakref.ref(fake_factory.engine)
    assert service.holder.loaded
    deadline = time.monotonic() + 10
    while service.holder.state != "not loaded" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not service.holder.loaded, "engine was not unloaded after the idle timeout"
    assert fake_factory.engine.closed
    fake_factory.engine = None
    gc.collect()
    assert engine_ref() is None, "something still holds the unloaded engine"
    assert service.status().model_state == "not loaded" or "missing" in service.status().model_state
    run(service, text="Reload me.")
    assert fake_factory.loads == 2


def test_no_unload_while_a_job_uses_the_engine(make_service, web_settings, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.3
    settings = dataclasses.replace(web_settings, idle_unload_minutes=0.05 / 60)
    service = make_service(settings)
    result = run(service, text="One. Two. Three. Four.")
    assert result.sentences == 4 and fake_factory.loads == 1  # never unloaded mid-job


@pytest.mark.parametrize("fields, error", [
    ({"text": ""}, TextError),
    ({"text": "   \n"}, TextError),
    ({"text": "x" * 5001}, TextError),
    ({"text": "hi", "speed": 0.2}, ParameterError),
    ({"text": "hi", "speed": 3}, ParameterError),
    ({"text": "hi", "speed": "fast"}, ParameterError),
    ({"text": "hi", "language": "xx"}, ParameterError),  # fr, ko...: known, refused by engines lacking them
    ({"text": "hi", "voice_id": "nobody"}, NotFoundError),
    ({"text": "hi", "consent": True, "prompt_audio": b"this is not audio"}, AudioError),
    ({"text": "hi", "consent": True, "prompt_audio": b""}, AudioError),
    ({"text": "hi", "prompt_text": "x" * 2001}, TextError),   # had no limit: read before every sentence
])
def test_bad_requests_are_refused_before_queueing(make_service, fake_factory, fields, error):
    service = make_service()
    with pytest.raises(error) as info:
        service.submit(TTSRequest(**fields))
    assert info.value.message
    assert fake_factory.loads == 0 and service.queue.stats().waiting == 0


def test_upload_over_limit_is_too_large(make_service, web_settings):
    service = make_service(dataclasses.replace(web_settings, max_upload_mb=0.01))
    with pytest.raises(PayloadTooLargeError):
        service.submit(TTSRequest(text="hi", consent=True, prompt_audio=wav_file(2.0)))


def test_unknown_preset_fails_in_job_first_then_up_front(make_service):
    service = make_service()
    job = service.submit(TTSRequest(text="hi", speaker="robot"))
    assert job.wait(10)
    with pytest.raises(NotFoundError, match="robot"):
        job.outcome()
    with pytest.raises(NotFoundError, match="female_1"):  # presets now known: refused at once
        service.submit(TTSRequest(text="hi", speaker="robot"))


def test_prompt_audio_on_an_engine_without_cloning_is_its_closest_built_in_voice(make_service, fake_factory):
    service = make_service()
    result = run(service, timeout=120, text="Hello.", speaker="female_2", consent=True, prompt_audio=wav_file(4.0))
    assert result.voice == "prompt audio"
    assert result.voice_match == "closest built-in voice / 最接近的内置音色"  # never "clone" on one that cannot
    assert isinstance(fake_factory.engine.calls[-1][1], VoicePrompt)


def test_job_says_it_prepares_the_voice_while_a_prompt_is_encoded(make_service, monkeypatch):
    """A new prompt's encoding may take seconds; the job's phase (status line, progress) says so."""
    from tests.helpers.fake_engine import FakeEngine

    phases: list[str] = []
    encode = FakeEngine.encode_prompt

    def slow_encode(self, audio, sample_rate, transcript, **options):
        time.sleep(0.3)
        return encode(self, audio, sample_rate, transcript, **options)

    monkeypatch.setattr(FakeEngine, "encode_prompt", slow_encode)
    service = make_service()
    job = service.submit(TTSRequest(text="Hello.", consent=True, prompt_audio=wav_file(4.0)))
    while not job.wait(0.02):
        phases.append(job.phase)
    assert PHASE_PREPARING_VOICE in phases
    job.outcome()


def test_cancel_while_a_request_is_still_being_checked_cancels_its_job(make_service, monkeypatch):
    """A UI Cancel can come while the Generate's request is being checked (a prompt is conditioned
    before it is queued); the job must not run anyway."""
    import threading

    service = make_service()
    checking = threading.Event()
    prepare = Service.prepare

    def slow_prepare(self, request):
        checking.set()
        time.sleep(0.3)
        return prepare(self, request)

    monkeypatch.setattr(Service, "prepare", slow_prepare)
    jobs = []
    submitter = threading.Thread(
        target=lambda: jobs.append(service.submit(TTSRequest(text="Hello."), owner="ui:a")))
    submitter.start()
    assert checking.wait(5)
    assert service.cancel_owner("ui:b") == 0  # another session's cancel does not touch it
    assert service.cancel_owner("ui:a") == 1
    submitter.join(5)
    (job,) = jobs
    assert job.wait(10)
    with pytest.raises(CancelledError):
        job.outcome()
    assert service.submissions.owners() == set()  # nothing left behind per owner
    later = service.submit(TTSRequest(text="Hello."), owner="ui:a")  # the next job is not affected
    assert later.wait(10) and later.outcome().duration > 0


def test_a_request_cancelled_while_being_checked_never_reaches_a_worker(make_service, monkeypatch):
    """Even when a worker takes a queued job up and finishes it at once (a short job on an idle
    queue), a cancel that came during the check wins: the job is made already cancelled and never
    runs. (Cancelling it just after queueing lost that race now and then: CI, 2026-11-30.)"""
    from cosyedge.service.jobs import JobState

    service = make_service()
    ran = []
    submit = service.queue.submit

    def eager_submit(fn, **kwargs):  # as if a worker ran the job before submit returned
        job = submit(lambda job: (ran.append(job.id), fn(job))[1], **kwargs)
        job.wait(10)
        return job

    monkeypatch.setattr(service.queue, "submit", eager_submit)
    prepare = Service.prepare

    def cancel_during_check(self, request):
        prepared = prepare(self, request)
        assert self.cancel_owner("ui:a") == 1  # the Cancel click lands while the request is checked
        return prepared

    monkeypatch.setattr(Service, "prepare", cancel_during_check)
    job = service.submit(TTSRequest(text="Hello."), owner="ui:a")
    assert job.finished and job.state is JobState.CANCELLED
    assert ran == []
    with pytest.raises(CancelledError):
        job.outcome()
    assert service.submissions.owners() == set()


def test_a_cancelled_submission_is_counted_once(make_service, fake_factory, monkeypatch):
    """A cancel that lands while the request is being queued counts it once, not as a flag and a job."""
    import threading

    from cosyedge.service.jobs import JobQueue

    fake_factory.engine_kwargs["delay"] = 0.5  # the job is still running when the cancel comes
    service = make_service()
    queued = JobQueue.submit

    def slow_queue(self, fn, **kwargs):
        job = queued(self, fn, **kwargs)
        time.sleep(0.3)  # the job is in the queue, the submission not yet finished
        return job

    monkeypatch.setattr(JobQueue, "submit", slow_queue)
    jobs = []
    submitter = threading.Thread(
        target=lambda: jobs.append(service.submit(TTSRequest(text="One. Two. Three."), owner="ui:a")))
    submitter.start()
    time.sleep(0.1)
    assert service.cancel_owner("ui:a") == 1
    submitter.join(5)
    assert jobs[0].wait(10)
    with pytest.raises(CancelledError):
        jobs[0].outcome()
    assert service.submissions.owners() == set()


def test_prompt_audio_on_a_cloning_engine_is_encoded(make_service, fake_factory):
    fake_factory.engine_kwargs["native_clone"] = True
    service = make_service()
    result = run(service, timeout=120, text="Hello.", consent=True, prompt_audio=wav_file(4.0), prompt_text="hi")
    assert result.voice_match == "native clone"
    voice = fake_factory.engine.calls[-1][1]
    assert voice.meta == {"transcript": "hi", "sample_rate": 24000}  # conditioned to 24 kHz first


def test_instruction_becomes_explicit_controls_on_an_engine_without_native_instruct(make_service,
                                                                                    fake_factory):
    service = make_service()
    plain = run(service, text="Hello.", speed=1.2)
    result = run(service, text="Hello.", speed=1.2, instruct="慢一点，大声，用男声，用四川话说")
    options = fake_factory.engine.calls[-1][2]
    assert options.instruct is None  # nothing passed to an engine that cannot read it
    assert options.speed == pytest.approx(1.2 * 0.8 ** 0.5, abs=1e-3)  # user's speed × plan
    assert fake_factory.engine.calls[-1][1] == "male_1" and result.voice == "male_1"
    assert "instruction" in result.voice_match
    report = result.instruct
    assert report["not_supported"] == ["dialect: Sichuanese (not supported by this engine)"]
    assert any(line.startswith("speed ×0.89") for line in report["applied"])
    assert report["controls"]["gain_db"] == 6.0
    assert np.sqrt(np.mean(result.audio ** 2)) > 1.5 * np.sqrt(np.mean(plain.audio ** 2))  # +6 dB
    result = run(service, text="Hello.")
    assert result.instruct["applied"] == [] and result.instruct["not_supported"] == []


def test_instruction_passed_natively_when_the_engine_follows_instructions(make_service,
                                                                         fake_factory):
    fake_factory.engine_kwargs["native_instruct"] = True
    service = make_service()
    result = run(service, text="Hello.", speed=1.1, instruct="用开心的语气说")
    options = fake_factory.engine.calls[-1][2]
    assert options.instruct == "用开心的语气说<|endofprompt|>"
    assert options.speed == 1.1  # the model reads the words; nothing applied twice
    assert result.instruct["not_supported"] == []
    assert result.instruct["controls"]["native"] is True
    assert "natively" in result.instruct["message"]


def test_cancel_stops_between_sentences(make_service, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.2
    service = make_service()
    job = service.submit(TTSRequest(text=" ".join(f"Sentence {i}." for i in range(20))))
    deadline = time.monotonic() + 10
    while job.done_steps < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.cancel(job.id)
    assert job.wait(5)
    with pytest.raises(CancelledError):
        job.outcome()
    assert 2 <= fake_factory.engine.sentences_done <= 4


def test_keep_file_writes_output_and_protects_it(make_service, web_settings):
    service = make_service()
    result = run(service, text="Keep this.", keep_file=True)
    assert result.path is not None and result.path.parent == (web_settings.outputs_path).resolve()
    assert result.path.name == f"{result.job_id}.wav"
    data, rate = sf.read(result.path)
    assert rate == 24000 and len(data) == len(result.audio)
    assert result.path in service.in_use_paths()
    service.lease(result.path, seconds=0)
    assert result.path not in service.in_use_paths()


def test_missing_model_is_a_clear_error_and_status_says_so(make_service, web_settings):
    def factory():
        raise ModelMissingError("model 'kokoro-int8' not found: run `python -m cosyedge setup-model`")

    service = make_service(factory=factory)
    assert "setup-model" in service.status().model_state
    job = service.submit(TTSRequest(text="hi"))
    assert job.wait(5)
    with pytest.raises(ModelMissingError, match="setup-model"):
        job.outcome()
    assert service.status().model_state != "loaded"


def test_status_line_shows_queue_position_and_thermal(make_service, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service()
    first = service.submit(TTSRequest(text="One. Two."), owner="ui:a")
    second = service.submit(TTSRequest(text="One. Two."), owner="ui:b")
    deadline = time.monotonic() + 5
    while service.queue.stats().running < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    third = service.submit(TTSRequest(text="One."), owner="ui:c")
    status = service.status("ui:c")
    assert status.position == 1
    line = status.line()
    assert "your position: 1" in line and "temperature: no temperature sensor" in line and "waiting 1/8" in line
    for job in (first, second, third):
        assert job.wait(10)
    assert service.status().as_dict()["loaded"] is True


def test_a_language_setting_that_was_not_applied_is_noted(make_service):
    """"English" over Chinese text reads it as Chinese, as auto does: the answer says so."""
    service = make_service()
    job = service.submit(TTSRequest(text="今天天气真好。", language="en"))
    assert job.wait(30)
    notes = job.outcome().notes
    assert any(n.startswith("language en not applied to 6 characters: read as Chinese") for n in notes), notes
    job = service.submit(TTSRequest(text="今天天气真好。", language="auto"))
    assert job.wait(30) and not job.outcome().notes


# --- one request path: each step once -----------------------------------------------------------


def test_the_prompt_is_decoded_once_per_request(make_service, monkeypatch):
    """prepare() conditions the upload before the queue; the worker encodes that same prompt."""
    import cosyedge.service.facade as service_module

    decoded = []
    condition = service_module.condition_prompt

    def counting_condition(data, **kwargs):
        decoded.append(len(data))
        return condition(data, **kwargs)

    monkeypatch.setattr(service_module, "condition_prompt", counting_condition)
    service = make_service()
    result = run(service, timeout=120, text="Hello.", consent=True, prompt_audio=wav_file(4.0))
    assert result.voice == "prompt audio"
    assert decoded == [len(wav_file(4.0))]


@pytest.mark.parametrize("stream", [False, True])
def test_the_engine_reads_the_text_once_per_request(make_service, fake_factory, stream):
    """One text pass (``Engine.analyze``) gives the report's skipped text and language notes and the
    sentences that are synthesized: the engine is handed the analysis, not the text again."""
    service = make_service()
    job = service.submit(TTSRequest(text="今天天气真好。Привет! Second one.", language="en"), stream=stream)
    assert job.wait(10)
    result = job.outcome()
    engine = fake_factory.engine
    assert engine.analyses == 1
    assert result.sentences == 3
    assert any(n.startswith("language en not applied to 6 characters") for n in result.notes), result.notes
    assert any("Cyrillic" in s for s in result.skipped), result.skipped
    if stream:
        assert job.stream.info.report["skipped"] == result.skipped
    assert engine.calls[-1][0] == "今天天气真好。Привет! Second one."
    # other callers hand the engine a plain string: it then makes its own pass
    assert len(list(engine.synthesize("One. Two.", "female_1", SynthesisOptions()))) == 2
    assert engine.analyses == 2


def test_the_worker_runs_the_prepared_request(make_service, monkeypatch):
    """submit() prepares once and the queued job resolves exactly that prepared request."""
    prepared, resolved = record_request_path(monkeypatch)
    run(make_service(), text="Hello.", consent=True, prompt_audio=wav_file(4.0))
    assert len(prepared) == 1 and prepared[0].prompt is not None
    assert resolved == prepared and resolved[0] is prepared[0]
