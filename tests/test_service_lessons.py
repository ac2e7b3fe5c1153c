"""Service: lessons as queued jobs (WAV, zip, progress, cancel) and the free-disk refusal."""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import zipfile

import pytest
import soundfile as sf

from cosyedge.errors import CancelledError, StorageFullError
from cosyedge.service.lessons import PARAGRAPH_PAUSE_S
from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import SAMPLE_RATE
from tests.helpers.waiting import wait_until

MB = 1_000_000


def lesson_text(paragraphs: int, sentence: str = "A sentence of the lesson.") -> bytes:
    return "\n\n".join(f"Paragraph {i}. {sentence}" for i in range(paragraphs)).encode()


def test_a_lesson_job_writes_one_wav_and_the_paragraph_zip(make_service, web_settings):
    service = make_service()
    lesson = service.read_lesson(lesson_text(4), "week 1.txt")
    job = service.submit_lesson(lesson, TTSRequest(text="", speaker="male_1", speed=1.25), owner="ui:a",
                                per_paragraph=True)
    assert job.wait(10)
    result = job.outcome()
    assert result.path == (web_settings.outputs_path / f"{job.id}.wav").resolve()
    audio, rate = sf.read(result.path, dtype="float32")
    assert rate == SAMPLE_RATE and len(audio) == result.frames and result.duration > 1
    assert (result.paragraphs, result.sentences, result.voice) == (4, 8, "male_1")
    with zipfile.ZipFile(result.zip_path) as archive:
        lengths = [len(sf.read(io.BytesIO(archive.read(n)))[0]) for n in archive.namelist() if n.endswith(".wav")]
        assert sum(n.endswith(".vtt") for n in archive.namelist()) == 4  # each paragraph's captions
    assert len(lengths) == 4
    assert sum(lengths) + 3 * int(PARAGRAPH_PAUSE_S * SAMPLE_RATE) == len(audio)
    assert result.path in service.in_use_paths() and result.zip_path in service.in_use_paths()
    assert job.done_steps == job.total_steps == 4
    assert result.report()["paragraphs"] == 4 and result.report()["zip"] is True
    assert result.report()["captions"] == ["srt", "vtt"] and len(result.captions.cues) == 8
    for path in result.caption_files.values():
        assert path.read_text("utf-8").count(" --> ") == 8 and path.resolve() in service.in_use_paths()


def test_lesson_progress_says_the_paragraph_and_the_time_left(make_service, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.05
    service = make_service()
    seen: list[tuple[int, object]] = []
    job = service.submit_lesson(service.read_lesson(lesson_text(4), "l.txt"), TTSRequest(text=""))
    while not job.wait(0.005):
        if getattr(job.phase, "code", None) == "lesson_progress":
            seen.append((job.done_steps, job.phase.params["seconds_left"]))
    paragraphs = sorted({done for done, _ in seen})
    assert paragraphs[:4] == [0, 1, 2, 3], seen
    assert [left for done, left in seen if done == 0][0] is None
    assert all(left is not None and left >= 0 for done, left in seen if done >= 1)


def test_cancelling_a_lesson_leaves_nothing_in_outputs(make_service, fake_factory, web_settings):
    fake_factory.engine_kwargs["delay"] = 0.05
    service = make_service()
    job = service.submit_lesson(service.read_lesson(lesson_text(20), "l.txt"), TTSRequest(text=""),
                                owner="ui:b", per_paragraph=True)
    wait_until(lambda: job.done_steps >= 2, timeout=10)
    assert service.cancel_owner("ui:b") == 1
    assert job.wait(10)
    with pytest.raises(CancelledError):
        job.outcome()
    assert list(web_settings.outputs_path.iterdir()) == []


def test_a_nearly_full_disk_refuses_jobs_lessons_and_saves(make_service, web_settings):
    free = {"bytes": 10 * MB}
    settings = dataclasses.replace(web_settings, min_free_disk_mb=50)
    service = make_service(settings, disk_probe=lambda folder: free["bytes"])
    lesson = service.read_lesson(lesson_text(2), "l.txt")
    for attempt in (lambda: service.submit(TTSRequest(text="Hello.")),
                    lambda: service.submit_lesson(lesson, TTSRequest(text="")),
                    lambda: service.save_voice("Ms Lee", b"RIFF", None, consent=True)):
        with pytest.raises(StorageFullError) as caught:
            attempt()
        assert caught.value.code == "disk_low" and caught.value.params["free_mb"] == 10.0
    assert service.active_jobs() == [] and list(web_settings.outputs_path.iterdir()) == []
    free["bytes"] = 60 * MB
    assert service.submit(TTSRequest(text="Hello.")).wait(10)


def test_the_disk_filling_during_a_lesson_stops_it_with_nothing_half_written(make_service, web_settings,
                                                                             fake_factory):
    free = {"bytes": 900 * MB}
    settings = dataclasses.replace(web_settings, min_free_disk_mb=50)
    service = make_service(settings, disk_probe=lambda folder: free["bytes"])
    fake_factory.engine_kwargs["delay"] = 0.02
    job = service.submit_lesson(service.read_lesson(lesson_text(10), "l.txt"), TTSRequest(text=""))
    wait_until(lambda: job.done_steps >= 3, timeout=10)
    free["bytes"] = 5 * MB
    assert job.wait(10)
    with pytest.raises(StorageFullError) as caught:
        job.outcome()
    assert caught.value.code == "disk_low"
    assert list(web_settings.outputs_path.iterdir()) == []


@pytest.fixture
def small_mount(tmp_path):
    """A 1 MB tmpfs, where this machine lets the tests mount one (root in a container that allows
    it); elsewhere the test is skipped: the probe seam above covers the refusal itself."""
    point = tmp_path / "small"
    point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: a real ENOSPC needs a small mount")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()}): a real ENOSPC needs one")
    yield point
    subprocess.run(["umount", str(point)], check=False)


def test_a_real_enospc_mid_lesson_is_disk_full_and_leaves_nothing(small_mount, make_service, web_settings):
    outputs = small_mount / "outputs"
    outputs.mkdir()
    settings = dataclasses.replace(web_settings, outputs_dir=outputs, min_free_disk_mb=0)
    service = make_service(settings)
    # ~48 kB of WAV per second of fake audio; 30 paragraphs of ~80 characters: ~1.3 MB, over 1 MB
    job = service.submit_lesson(service.read_lesson(lesson_text(30, "x" * 70 + "."), "l.txt"),
                                TTSRequest(text=""))
    assert job.wait(20)
    with pytest.raises(StorageFullError) as caught:
        job.outcome()
    assert caught.value.code == "disk_full"
    assert list(outputs.iterdir()) == []
    assert shutil.disk_usage(small_mount).used < 64 * 1024  # the partial WAV's blocks are free again


def test_a_lesson_in_a_cloned_voice_needs_consent_like_any_clone(make_service):
    from cosyedge.errors import CosyedgeError
    from tests.test_service import wav_file

    service = make_service()
    lesson = service.read_lesson(lesson_text(2), "l.txt")
    with pytest.raises(CosyedgeError) as caught:
        service.submit_lesson(lesson, TTSRequest(text="", prompt_audio=wav_file(4.0)))
    assert caught.value.code == "consent_required"
    job = service.submit_lesson(lesson, TTSRequest(text="", prompt_audio=wav_file(4.0), consent=True))
    assert job.wait(20) and job.outcome().voice == "prompt audio"


def test_a_lesson_cancelled_while_being_checked_never_reaches_a_worker(make_service, monkeypatch):
    """As with `submit`: a Cancel that lands while the lesson's request is checked (its prompt is
    conditioned before it is queued) is counted, and the job is queued already cancelled."""
    from cosyedge.service.jobs import JobState
    from cosyedge.service.facade import Service

    service = make_service()
    lesson = service.read_lesson(lesson_text(3), "l.txt")
    prepare = Service.prepare
    cancels: list[int] = []

    def cancel_during_check(self, request):
        prepared = prepare(self, request)
        cancels.append(self.cancel_owner("ui:a"))  # the Cancel click lands while it is checked
        return prepared

    monkeypatch.setattr(Service, "prepare", cancel_during_check)
    job = service.submit_lesson(lesson, TTSRequest(text=""), owner="ui:a")
    assert cancels == [1]
    assert job.wait(10) and job.state is JobState.CANCELLED and job.done_steps == 0
    with pytest.raises(CancelledError):
        job.outcome()
    monkeypatch.setattr(Service, "prepare", prepare)
    later = service.submit_lesson(lesson, TTSRequest(text=""), owner="ui:a")  # the next is not affected
    assert later.wait(10) and later.outcome().paragraphs == 3
