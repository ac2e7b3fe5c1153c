"""The page's prompt transcripts without a browser: the clone tab's transcribe button, the panel's
clone mode and transcript lines, and the My voices tab's transcript words."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from cosyedge.service.requests import TTSRequest
from cosyedge.voices.transcripts import SOURCE_HEARD, SOURCE_USER, ZERO_SHOT_CONFIDENCE, PromptTranscript
from cosyedge.web.report_panel import describe
from cosyedge.web.ui import transcribe_prompt
from cosyedge.web.voices_tab import transcript_line
from tests.helpers.fake_engine import FakeFactory
from tests.helpers.fake_recognizer import FakeRecognizer
from tests.helpers.waiting import wait_until
from tests.test_audio_prompt import encode, speechlike

SESSION = SimpleNamespace(session_hash="page")


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompt.wav"
    path.write_bytes(encode(speechlike(4.0), 24000))
    return str(path)


def test_the_transcribe_button_fills_the_box_with_a_sure_transcript(make_service, prompt_file):
    recognizer = FakeRecognizer(text="Good morning, class.", confidence=0.95)
    service = make_service(recognizer=recognizer)
    value, line = asyncio.run(transcribe_prompt(service, prompt_file, "en", True, SESSION))
    assert value == "Good morning, class." and "0.95" in line
    assert recognizer.calls[0][2] == "en"
    wait_until(lambda: service.active_jobs() == [], what="the transcription job to leave the queue")


def test_an_unsure_transcript_is_shown_but_not_filled_in(make_service, prompt_file):
    import gradio as gr

    service = make_service(recognizer=FakeRecognizer(text="gud mornin", confidence=ZERO_SHOT_CONFIDENCE / 2))
    value, line = asyncio.run(transcribe_prompt(service, prompt_file, "auto", True, SESSION))
    assert value == gr.skip() and "gud mornin" in line and "Not filled in" in line


def test_the_transcribe_button_needs_a_prompt_and_consent(make_service, prompt_file):
    import gradio as gr

    service = make_service(recognizer=FakeRecognizer())
    with pytest.raises(gr.Error, match="Record or upload"):
        asyncio.run(transcribe_prompt(service, None, "en", True, SESSION))
    with pytest.raises(gr.Error, match="(?i)consent|agreed"):
        asyncio.run(transcribe_prompt(service, prompt_file, "en", False, SESSION))


def test_the_panel_shows_the_mode_and_the_heard_transcript_not_as_ignored(make_service):
    service = make_service(factory=FakeFactory(native_clone=True),
                           recognizer=FakeRecognizer(text="Hello <b>class</b>.", confidence=0.91))
    job = service.submit(TTSRequest(text="Hi.", consent=True, prompt_audio=encode(speechlike(4.0), 24000)))
    assert job.wait(30)
    panel = describe(job.outcome())
    assert "**Clone mode / 克隆方式**: zero-shot" in panel
    assert "heard offline / 离线识别, confidence / 置信度 0.91" in panel
    assert "<b>" not in panel  # the heard text is user-like text: escaped
    assert "Ignored" not in panel


def test_the_voices_tab_says_where_a_transcript_came_from():
    assert "No transcript yet" in transcript_line(PromptTranscript(""))
    assert "Typed" in transcript_line(PromptTranscript("hi", SOURCE_USER))
    sure = transcript_line(PromptTranscript("hi", SOURCE_HEARD, confidence=0.9))
    unsure = transcript_line(PromptTranscript("hi", SOURCE_HEARD, confidence=0.2))
    assert "0.90" in sure and "sure enough" in sure and "unsure" in unsure
