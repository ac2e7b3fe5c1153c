"""Real-browser tests of captions and the Pronunciation tab: Debian chromium driven by playwright,
headless (the fixture and page helpers are test_browser's).

A teacher generates a text and sees its sentences with their times under the result, with the
WebVTT and SRT files to download; then adds, edits, listens to, deletes, imports and exports
dictionary entries, and is told in both languages what is wrong with a bad one.
Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import re

import pytest

from tests.web.test_browser import ARTIFACTS, browser, generate, open_page, open_tab, toast_texts  # noqa: F401
from tests.web.test_browser_studio import choose, fetch_bytes

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_each_result_shows_its_captions_with_the_files_to_download(browser, make_service, live_server):
    from playwright.sync_api import expect

    server = live_server(make_service(), with_ui=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, _ = open_page(browser, server.url)
    try:
        _, panel = generate(page, "preset", "Rivers run to the sea. They carry water!")
        assert "Captions / 字幕 (2 cue(s)" in panel
        assert re.search(r"00:00\.00 → 00:\d\d\.\d\d\s+Rivers run to the sea\.", panel), panel
        assert "They carry water!" in panel
        links = page.locator("#preset-captions a[download]")
        expect(links).to_have_count(2, timeout=10_000)
        hrefs = [links.nth(i).get_attribute("href") for i in range(2)]
        texts = {href.rsplit(".", 1)[1]: fetch_bytes(page, href).decode("utf-8") for href in hrefs}
        assert texts["vtt"].startswith("WEBVTT") and "They carry water!" in texts["vtt"]
        assert texts["srt"].startswith("1\n00:00:00,000 --> ")
        page.screenshot(path=str(ARTIFACTS / "captions.png"), full_page=True)
    finally:
        context.close()


def test_the_pronunciation_tab_adds_edits_listens_deletes_imports_and_exports(browser, make_service,
                                                                               live_server, tmp_path):
    from playwright.sync_api import expect

    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.get_by_role("tab").first.wait_for(timeout=30_000)
        assert page.get_by_role("button", name="More tabs").count() == 0  # all tabs fit at 1280 px (PAGE_CSS)
        open_tab(page, "Pronunciation / 读音")
        page.locator("#pron-word textarea, #pron-word input").first.fill("银行")
        page.locator("#pron-reading textarea, #pron-reading input").first.fill("yin2 hang9")
        page.locator("#pron-save").click()
        expect(page.locator(".toast-body").first).to_contain_text("hang9", timeout=15_000)
        assert any("声调超出范围" in text for text in toast_texts(page))  # the page's Chinese, by code
        assert service.pronunciation_entries()["entries"] == []

        page.locator("#pron-reading textarea, #pron-reading input").first.fill("yin2 hang2")
        page.locator("#pron-save").click()
        expect(page.locator("#pron-result")).to_contain_text("Saved / 已保存: 银行 → yin2 hang2", timeout=15_000)
        expect(page.locator("#pron-table")).to_contain_text("yin2 hang2")
        assert [e["reading"] for e in service.pronunciation_entries()["entries"]] == ["yin2 hang2"]

        page.locator("#pron-listen").click()  # the word read with the reading, in the chosen voice
        page.locator("#pron-audio audio[src]").first.wait_for(state="attached", timeout=30_000)

        page.locator("#pron-table [role=gridcell]").filter(has_text="yin2 hang2").first.click()  # a row fills the boxes
        expect(page.locator("#pron-word textarea, #pron-word input").first).to_have_value("银行", timeout=10_000)
        page.locator("#pron-reading textarea, #pron-reading input").first.fill("yín háng")
        page.locator("#pron-save").click()
        expect(page.locator("#pron-result")).to_contain_text("Replaced / 已替换", timeout=15_000)

        tsv = tmp_path / "class.tsv"
        tsv.write_text("en\tSiobhan\tʃɪˈvɔːn\nzh\t生肖\tsheng1\n", encoding="utf-8")
        page.locator("#pron-import-file input[type=file]").set_input_files(str(tsv))
        page.locator("#pron-import").click()
        result = page.locator("#pron-import-result")
        expect(result).to_contain_text("1 added", timeout=15_000)
        expect(result).to_contain_text("line / 行 2")
        expect(page.locator("#pron-table")).to_contain_text("Siobhan")

        page.locator("#pron-export").click()
        link = page.locator("#pron-export-file a[download]").first
        link.wait_for(timeout=15_000)
        exported = fetch_bytes(page, link.get_attribute("href")).decode("utf-8")
        assert "en\tSiobhan\t/ʃɪˈvɔːn/\n" in exported and "zh\t银行\tyin2 hang2\n" in exported

        choose(page, "pron-language", "English / 英语 (en)")
        page.locator("#pron-word textarea, #pron-word input").first.fill("Siobhan")
        page.locator("#pron-delete").click()
        expect(page.locator("#pron-result")).to_contain_text("Deleted / 已删除: Siobhan", timeout=15_000)
        expect(page.locator("#pron-table")).not_to_contain_text("Siobhan")
        page.screenshot(path=str(ARTIFACTS / "pronunciation.png"), full_page=True)
    finally:
        context.close()
    assert [e["word"] for e in service.pronunciation_entries()["entries"]] == ["银行"]
