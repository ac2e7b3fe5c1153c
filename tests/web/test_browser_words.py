"""Real-browser checks of the page's words and toasts (Debian chromium via playwright, as
tests/web/test_browser.py): the instruct panel's items and the History notice carry Chinese, and a
pile of error toasts never covers the tab bar; a truncated WAV is refused and a Chinese name renamed
in both languages."""

from __future__ import annotations

import dataclasses

import pytest

from tests.web.test_browser import ARTIFACTS, TABS, browser, generate, open_page, open_tab  # noqa: F401
from tests.web.test_browser_studio import STUDIO_TABS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_instruct_panel_and_the_history_notice_are_bilingual(browser, make_service,  # noqa: F811
                                                                 live_server, web_settings):
    service = make_service(dataclasses.replace(web_settings, janitor_max_age_hours=24,
                                               janitor_max_files=500, janitor_max_total_mb=1024))
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        open_tab(page, TABS["instruct"])
        page.locator("#instruct-instruction textarea").fill("用开心的语气说，慢一点，用四川话")
        _, panel = generate(page, "instruct", "今天天气真好。")
        assert "已转为明确的控制执行" in panel or "已在此引擎能做到的范围内" in panel, panel
        assert "speed ×0.89 ('慢一点') / 语速 ×0.89（“慢一点”）" in panel, panel
        assert "情绪“开心”（“开心”）以音高 +1.0 半音近似（语速由“慢一点”决定）" in panel, panel
        assert "（此引擎不支持）" in panel, panel  # the dialect, not supported
        assert "1 句，用时" in panel, panel
        open_tab(page, STUDIO_TABS["history"])
        notice = page.locator("#history-notice")
        notice.get_by_text("总共最多 1024 MB").first.wait_for(timeout=15_000)
        assert "最多保留 24 小时，最多 500 个、总共最多 1024 MB（最旧的先删除）" in notice.inner_text()
        page.screenshot(path=str(ARTIFACTS / "bilingual-history.png"), full_page=True)
    finally:
        context.close()


def test_error_toasts_never_cover_the_tab_bar(browser, make_service, live_server):  # noqa: F811
    """Four refused generates in a row: the toasts stack away from the top, so every tab can still
    be clicked (they used to cover Models, My voices and History until each was closed)."""
    server = live_server(make_service(), with_ui=True)
    context, page, _ = open_page(browser, server.url, viewport={"width": 1280, "height": 800})
    try:
        open_tab(page, TABS["preset"])
        for _ in range(4):
            page.locator("#preset-generate").click()
            page.wait_for_timeout(300)
        page.locator(".toast-body").first.wait_for(timeout=15_000)
        page.evaluate("window.scrollTo(0, 0)")
        toasts = page.locator(".toast-wrap").bounding_box()
        tabs = page.get_by_role("tablist").first.bounding_box()
        assert toasts["y"] > tabs["y"] + tabs["height"], (toasts, tabs)  # below the tab bar
        assert toasts["height"] <= 0.41 * 800, toasts  # a pile scrolls within 40 % of the window
        page.screenshot(path=str(ARTIFACTS / "toasts.png"))
        open_tab(page, STUDIO_TABS["history"])  # reachable with the toasts up
        page.locator("#history-notice").wait_for(timeout=10_000)
    finally:
        context.close()


def test_a_truncated_wav_is_refused_and_a_chinese_name_keeps_its_id_in_both_languages(  # noqa: F811
        browser, make_service, live_server, tmp_path):
    """Two lines the walkthrough met in English only or not at all: the clone tab's refusal of a WAV
    cut short names the bytes in Chinese too, and renaming 王老师 keeps wang-lao-shi (it became
    mswang-wang-lao-shi without a word) and says so in both languages."""
    import io

    import soundfile as sf
    from playwright.sync_api import expect

    from tests.test_audio_prompt import speechlike
    from tests.web.test_browser_studio import choose

    service = make_service()
    whole = io.BytesIO()
    sf.write(whole, speechlike(4.0), 16000, format="WAV")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole.getvalue()[:len(whole.getvalue()) // 2])
    saved = service.save_voice("王老师", whole.getvalue(), "同学们好", consent=True)
    assert saved.id == "wang-lao-shi"
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.locator("#clone-prompt input[type=file]").set_input_files(str(cut))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-consent input[type=checkbox]").check()
        page.locator("#clone-text textarea").fill("Good morning, class.")
        page.locator("#clone-generate").click()
        toast = page.locator(".toast-body", has_text="truncated").first
        toast.wait_for(timeout=30_000)
        assert "WAV 文件不完整" in toast.inner_text() and "请上传完整的文件" in toast.inner_text()

        open_tab(page, STUDIO_TABS["voices"])
        choose(page, "voices-choice", "王老师 (wang-lao-shi)")
        name_box = page.locator("#voices-new-name textarea, #voices-new-name input").first
        expect(name_box).to_have_value("王老师", timeout=10_000)
        name_box.fill("Ms Wang 王老师")
        page.locator("#voices-rename").click()
        expect(page.locator("#voices-message")).to_contain_text(
            "Renamed / 已重命名: Ms Wang 王老师 (id wang-lao-shi stays / id 不变)", timeout=15_000)
        assert [(v.id, v.name) for v in service.saved_voices()] == [("wang-lao-shi", "Ms Wang 王老师")]
    finally:
        context.close()
