"""Real-browser checks of the page's words and toasts (Debian chromium via playwright, as
tests/web/test_browser.py): the instruct panel's items and the History notice carry Chinese, and a
pile of error toasts never covers the tab bar."""

from __future__ import annotations

import dataclasses

import pytest

from tests.web.test_browser import ARTIFACTS, TABS, browser, generate, open_page  # noqa: F401
from tests.web.test_browser_studio import STUDIO_TABS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_instruct_panel_and_the_history_notice_are_bilingual(browser, make_service,  # noqa: F811
                                                                 live_server, web_settings):
    service = make_service(dataclasses.replace(web_settings, janitor_max_age_hours=24,
                                               janitor_max_files=500, janitor_max_total_mb=1024))
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.get_by_role("tab", name=TABS["instruct"]).click()
        page.locator("#instruct-instruction textarea").fill("用开心的语气说，慢一点，用四川话")
        _, panel = generate(page, "instruct", "今天天气真好。")
        assert "已转为明确的控制执行" in panel or "已在此引擎能做到的范围内" in panel, panel
        assert "speed ×0.89 ('慢一点') / 语速 ×0.89（“慢一点”）" in panel, panel
        assert "情绪“开心”（“开心”）以音高 +1.0 半音近似（语速由“慢一点”决定）" in panel, panel
        assert "（此引擎不支持）" in panel, panel  # the dialect, not supported
        assert "1 句，用时" in panel, panel
        page.get_by_role("tab", name=STUDIO_TABS["history"]).click()
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
        page.get_by_role("tab", name=TABS["preset"]).click()
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
        page.get_by_role("tab", name=STUDIO_TABS["history"]).click()  # reachable with the toasts up
        page.locator("#history-notice").wait_for(timeout=10_000)
    finally:
        context.close()
