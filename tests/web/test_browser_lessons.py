"""Real-browser test of the lesson box (Debian chromium via playwright, as tests/web/test_browser.py):
a lesson file uploaded in a tab comes back as one WAV in the tab's player and, when asked for, a zip
of one WAV per paragraph; a file that is not UTF-8 is refused in a toast that says so."""

from __future__ import annotations

import io
import zipfile

import pytest
import soundfile as sf

from tests.web.test_browser import ARTIFACTS, TABS, assert_all_local, browser, open_page, toast_texts  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LESSON = "# Rivers\n\nRivers run to the sea. They carry water.\n\nThe sea is salty!\n\nEnd of the lesson."


def fetch(page, href: str) -> bytes:
    """The bytes behind a link of the page, fetched from inside it (same origin)."""
    return bytes(page.evaluate("""async (url) => Array.from(new Uint8Array(await (await fetch(url))
                                  .arrayBuffer()))""", href))


def test_a_lesson_file_comes_back_as_one_wav_and_a_zip_of_paragraphs(browser, make_service,  # noqa: F811
                                                                     live_server, tmp_path):
    service = make_service()
    server = live_server(service, with_ui=True)
    lesson = tmp_path / "rivers.md"
    lesson.write_text(LESSON, encoding="utf-8")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, requests = open_page(browser, server.url)
    try:
        page.get_by_role("tab", name=TABS["preset"]).click()
        page.locator("#preset-lesson").get_by_text("Long lesson from a file").first.click()  # unfold
        assert "60,000 characters" in page.locator("#preset-lesson-limit").inner_text()
        page.locator("#preset-lesson-file input[type=file]").set_input_files(str(lesson))
        page.locator("#preset-lesson-file").get_by_text("rivers.md").first.wait_for(timeout=30_000)
        page.locator("#preset-lesson-zip-wanted input[type=checkbox]").check()
        page.locator("#preset-lesson-generate").click()
        # a lesson is not streamed: the live line says it plays at the end, not "playing while it is made"
        page.locator("#preset-live").get_by_text("A lesson plays once it is all made").wait_for(timeout=15_000)
        assert "边合成边播放" not in page.locator("#preset-live").inner_text()
        page.locator("#preset-output audio[src]").first.wait_for(state="attached", timeout=60_000)
        href = page.locator("#preset-output a[download]").first.get_attribute("href", timeout=10_000)
        audio, rate = sf.read(io.BytesIO(fetch(page, href)), dtype="float32")
        panel = page.locator("#preset-panel")
        panel.get_by_text("Lesson / 课文").first.wait_for(timeout=10_000)
        assert "4 paragraph(s)" in panel.inner_text()
        zip_link = page.locator("#preset-lesson-zip a[href]").first
        zip_link.wait_for(timeout=10_000)
        assert zip_link.get_attribute("download") == "rivers-paragraphs.zip"  # not the job's hash
        assert "rivers-paragraphs" in page.locator("#preset-lesson-zip").inner_text()
        with zipfile.ZipFile(io.BytesIO(fetch(page, zip_link.get_attribute("href")))) as archive:
            names = archive.namelist()
            first = sf.read(io.BytesIO(archive.read(names[0])))[0]
        assert names == [f"paragraph-00{i}.wav" for i in range(1, 5)]
        assert rate == 24000 and len(audio) > len(first) > 0.1 * rate
        page.screenshot(path=str(ARTIFACTS / "preset-lesson.png"), full_page=True)
    finally:
        context.close()
    assert_all_local(requests, server.url)


def test_a_lesson_that_is_not_utf8_is_refused_in_words(browser, make_service, live_server,  # noqa: F811
                                                       tmp_path):
    service = make_service()
    server = live_server(service, with_ui=True)
    lesson = tmp_path / "old.txt"
    lesson.write_bytes("Grüße aus Köln. Das ist die Lektion.".encode("latin-1"))
    context, page, _ = open_page(browser, server.url)
    try:
        page.locator("#clone-lesson").get_by_text("Long lesson from a file").first.click()
        page.locator("#clone-lesson-file input[type=file]").set_input_files(str(lesson))
        page.locator("#clone-lesson-file").get_by_text("old.txt").first.wait_for(timeout=30_000)
        page.locator("#clone-lesson-generate").click()
        page.locator(".toast-body", has_text="Record or upload").wait_for(timeout=15_000)
        page.get_by_role("tab", name=TABS["instruct"]).click()
        page.locator("#instruct-lesson").get_by_text("Long lesson from a file").first.click()
        page.locator("#instruct-lesson-file input[type=file]").set_input_files(str(lesson))
        page.locator("#instruct-lesson-file").get_by_text("old.txt").first.wait_for(timeout=30_000)
        page.locator("#instruct-lesson-generate").click()
        page.locator(".toast-body", has_text="not UTF-8").wait_for(timeout=15_000)
        texts = toast_texts(page)
        assert any("Cannot read the lesson / 无法朗读课文" in t and "UTF-8 编码" in t for t in texts), texts
        assert service.active_jobs() == []
    finally:
        context.close()
