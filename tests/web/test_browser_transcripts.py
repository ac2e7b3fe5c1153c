"""Real-browser test of prompt transcripts on the page (Debian chromium, headless; the fixture and
page helpers are test_browser's): the clone tab's Transcribe button fills the transcript box for
editing, the answer names the clone mode and the transcript used, and My voices edits a saved
voice's transcript. The recognizer is the fake one (the real one is tests/test_service_transcripts.py's)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tests.helpers.fake_engine import FakeFactory
from tests.helpers.fake_recognizer import FakeRecognizer
from tests.helpers.waiting import wait_until
from tests.web.test_browser import ARTIFACTS, browser, generate, open_page, open_tab  # noqa: F401
from tests.web.test_browser_studio import STUDIO_TABS, choose

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_clone_tab_shows_the_transcript_for_editing(browser, make_service, live_server, tmp_path):
    from playwright.sync_api import expect

    recognizer = FakeRecognizer(text="Good morning, class.", confidence=0.93)
    service = make_service(factory=FakeFactory(native_clone=True), recognizer=recognizer)
    server = live_server(service, with_ui=True)
    prompt = tmp_path / "prompt.wav"
    sf.write(prompt, 0.2 * np.sin(2 * np.pi * 200 * np.arange(80000) / 16000), 16000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.locator("#clone-prompt input[type=file]").set_input_files(str(prompt))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-consent input[type=checkbox]").check()
        page.locator("#clone-transcribe").click()
        box = page.locator("#clone-prompt-text textarea, #clone-prompt-text input").first
        expect(box).to_have_value("Good morning, class.", timeout=30_000)
        expect(page.locator("#clone-heard")).to_contain_text("confidence / 置信度 0.93")
        page.screenshot(path=str(ARTIFACTS / "clone-transcribed.png"), full_page=True)
        assert len(recognizer.calls) == 1

        box.fill("Good morning, my class.")  # corrected by the teacher: used as typed
        _, panel = generate(page, "clone", "Hello there.")
        assert "zero-shot" in panel and "Good morning, my class." in panel and "as typed / 按输入" in panel

        box.fill("")  # left empty: heard in the job (once per prompt), shown in the answer
        _, panel = generate(page, "clone", "Hello again.")
        expect(page.locator("#clone-panel")).to_contain_text("heard offline / 离线识别", timeout=30_000)
        panel = page.locator("#clone-panel").inner_text()
        assert "Good morning, class." in panel and "confidence / 置信度 0.93" in panel
        page.screenshot(path=str(ARTIFACTS / "clone-heard.png"), full_page=True)
    finally:
        context.close()


def test_my_voices_edits_a_saved_voices_transcript(browser, make_service, live_server, tmp_path):
    from playwright.sync_api import expect

    service = make_service(recognizer=FakeRecognizer(text="Good morning, class.", confidence=0.4))
    wav = tmp_path / "prompt.wav"
    sf.write(wav, 0.2 * np.sin(2 * np.pi * 200 * np.arange(80000) / 16000), 16000)
    info = service.save_voice("Ms Lee", wav.read_bytes(), "", consent=True)  # heard in the background
    wait_until(lambda: service.voice_transcript(info.id).text, timeout=30, what="the transcript heard")
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        open_tab(page, STUDIO_TABS["voices"])
        choose(page, "voices-choice", "Ms Lee (ms-lee)")
        box = page.locator("#voices-transcript textarea, #voices-transcript input").first
        expect(box).to_have_value("Good morning, class.", timeout=15_000)
        expect(page.locator("#voices-transcript-info")).to_contain_text("unsure")
        box.fill("Good morning, everyone.")
        page.locator("#voices-save-transcript").click()
        expect(page.locator("#voices-message")).to_contain_text("Transcript saved", timeout=15_000)
        expect(page.locator("#voices-transcript-info")).to_contain_text("Typed")
        stored = service.voice_transcript(info.id)
        assert (stored.text, stored.source) == ("Good morning, everyone.", "user")
        page.screenshot(path=str(ARTIFACTS / "voices-transcript.png"), full_page=True)
    finally:
        context.close()
