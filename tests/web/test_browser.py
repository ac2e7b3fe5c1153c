"""Real-browser test: Debian chromium driven by playwright (no browser download), headless.

Runs in CI (.ci/run installs chromium). If chromium is missing the test FAILS with a message;
set COSYEDGE_SKIP_BROWSER=1 to skip it on a machine without a browser.
Screenshots of each tab go to test-artifacts/browser/.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from tests.helpers import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = os.environ.get("COSYEDGE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = REPO / "test-artifacts" / "browser"
TABS = {"clone": "3s quick clone / 3秒极速复刻", "instruct": "natural-language instruct / 自然语言控制",
        "preset": "preset voices / 预置音色"}


@pytest.fixture(scope="module")
def browser():
    if os.environ.get("COSYEDGE_SKIP_BROWSER") == "1":
        pytest.skip("COSYEDGE_SKIP_BROWSER=1")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        pytest.fail(f"chromium not found at {CHROMIUM}: `apt-get install -y chromium` "
                    "(or set COSYEDGE_SKIP_BROWSER=1 to skip the browser test)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield chrome
        chrome.close()


def open_page(browser, url: str, **context_args):
    context = browser.new_context(**context_args)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda ws: requests.append(ws.url))
    page.goto(url, wait_until="load")
    page.get_by_role("tab", name=TABS["clone"]).wait_for(timeout=30_000)
    return context, page, requests

def open_tab(page, label: str) -> None:
    """Open the tab ``label``, from the "More tabs" menu when the tab bar has no room for it."""
    page.get_by_role("tab").first.wait_for(timeout=30_000)
    tabs = page.get_by_role("tab", name=label)
    for i in range(tabs.count()):  # the bar keeps a hidden copy of its tabs to measure them
        if tabs.nth(i).is_visible():
            tabs.nth(i).click()
            return
    page.get_by_role("button", name="More tabs").click()
    page.locator(".overflow-dropdown button", has_text=label).first.click()


def generate_preset(page, text: str) -> None:
    """Open the preset tab, type ``text`` and press generate."""
    open_tab(page, TABS["preset"])
    page.locator("#preset-text textarea").fill(text)
    page.locator("#preset-generate").click()



def assert_all_local(requests: list[str], server_url: str) -> None:
    assert requests, "no request recorded"
    for url in requests:
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob"):
            continue  # in-page data, not the network
        assert parsed.hostname == "127.0.0.1", f"request outside 127.0.0.1: {url}"
    assert any(url.startswith(server_url) for url in requests)


def generate(page, tab: str, text: str, timeout_ms: int = 60_000) -> tuple[bytes, str]:
    """Type, click generate, and return (bytes behind the audio element, the report panel)."""
    page.get_by_role("tab", name=TABS[tab]).click()
    page.locator(f"#{tab}-text textarea").fill(text)
    page.locator(f"#{tab}-generate").click()
    # The player (inside wavesurfer's shadow DOM, which locators pierce) gets a src once audio is in.
    page.locator(f"#{tab}-output audio[src]").first.wait_for(state="attached", timeout=timeout_ms)
    href = page.locator(f"#{tab}-output a[download]").first.get_attribute("href", timeout=10_000)
    assert href
    # Fetch the WAV the download button offers, from inside the page (same origin, same credentials).
    data = page.evaluate("""async (url) => {
        const buf = new Uint8Array(await (await fetch(url)).arrayBuffer());
        return Array.from(buf);
    }""", href)
    page.locator(f"#{tab}-panel").get_by_text("Engine / 引擎").first.wait_for(timeout=10_000)
    return bytes(data), page.locator(f"#{tab}-panel").inner_text()


def test_page_tabs_generate_and_stay_local(browser, make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.2
    service = make_service()
    server = live_server(service, with_ui=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, requests = open_page(browser, server.url)
    try:
        for tab, label in TABS.items():
            open_tab(page, label)
            page.locator(f"#{tab}-generate").wait_for(state="visible", timeout=20_000)
            page.screenshot(path=str(ARTIFACTS / f"{tab}.png"), full_page=True)
        assert "not loaded" in page.locator("#preset-status").inner_text() or \
            "missing" in page.locator("#preset-status").inner_text()

        data, panel = generate(page, "preset", "Hello from the browser. Second sentence.")
        assert data[:4] == b"RIFF" and len(data) > 44 + 1000, "no WAV in the audio element"
        assert "female_1" in panel and "2 sentence" in panel
        page.screenshot(path=str(ARTIFACTS / "preset-result.png"), full_page=True)

        open_tab(page, TABS["instruct"])
        from playwright.sync_api import expect

        page.get_by_role("button", name="用开心的语气说").first.click()  # a clickable example
        expect(page.locator("#instruct-instruction textarea")).to_have_value("用开心的语气说",
                                                                             timeout=10_000)
        data, panel = generate(page, "instruct", "今天天气真好。")
        assert data[:4] == b"RIFF"
        assert "emotion 'happy'" in panel and "approximated" in panel
        page.screenshot(path=str(ARTIFACTS / "instruct-result.png"), full_page=True)
        assert fake_factory.loads == 1
        # the status line refreshes every STATUS_REFRESH_S: wait for it to say the model is loaded
        expect(page.locator("#preset-status")).to_contain_text(re.compile(r"(?<!not )loaded"),
                                                                timeout=10_000)
        assert "loaded" in page.locator("#preset-status").inner_text()
    finally:
        context.close()
    assert_all_local(requests, server.url)


def test_live_player_plays_while_the_job_runs_and_the_file_follows(browser, make_service, live_server,
                                                                   fake_factory):
    # ten sentences: ~5 s of synthesis, made faster than it plays (~0.6 s of audio per 0.5 s), so the
    # player starts at once (slower audio is buffered first: test_slow_audio_is_buffered_and_says_so)
    fake_factory.engine_kwargs["delay"] = 0.5
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, requests = open_page(browser, server.url)
    try:
        generate_preset(page, " ".join(f"Sentence number {i} is here and it is fairly long." for i in range(10)))
        # the page schedules the job's first pieces for playback while the job still synthesizes
        page.wait_for_function("() => { const e = document.querySelector('#preset-live [data-scheduled]');"
                               " return e && parseFloat(e.dataset.scheduled) > 0; }", timeout=20_000)
        jobs = service.queue.active_jobs()
        assert jobs and jobs[0].done_steps < 5, "audio only reached the player late"
        data, panel = generate_result(page, "preset")
        assert data[:4] == b"RIFF" and "10 sentence" in panel
        page.wait_for_function("() => document.querySelector('#preset-live [data-state]').dataset.state"
                               " === 'done'", timeout=20_000)
        scheduled = float(page.locator("#preset-live [data-scheduled]").get_attribute("data-scheduled"))
        import io

        import soundfile as sf

        assert scheduled == pytest.approx(sf.info(io.BytesIO(data)).duration, abs=0.01)  # all of it
    finally:
        context.close()
    assert_all_local(requests, server.url)


#: Records every Web Audio source the page starts and whether it was stopped or has ended.
SOURCE_SPY = """
window.__sources = [];
const start = AudioBufferSourceNode.prototype.start;
AudioBufferSourceNode.prototype.start = function (...args) {
  window.__sources.push(this);
  this.addEventListener('ended', () => { this.__ended = true; });
  return start.apply(this, args);
};
const stop = AudioBufferSourceNode.prototype.stop;
AudioBufferSourceNode.prototype.stop = function (...args) {
  this.__stopped = true;
  return stop.apply(this, args);
};
"""


@pytest.mark.parametrize("silence_with", ["new job", "cancel", "other tab", "cancel on other tab"])
def test_audio_still_scheduled_is_silenced(browser, make_service, live_server, silence_with):
    """Synthesis runs far ahead of playback: a finished job can have minutes still to play. A new
    job, Cancel (nothing runs any more), a job on another tab and Cancel on another tab must each
    silence it."""
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    state = "() => document.querySelector('#preset-live [data-state]')?.dataset.state"
    try:
        page.add_init_script(SOURCE_SPY)
        page.reload(wait_until="load")
        generate_preset(page, " ".join(f"Sentence number {i}." for i in range(40)))
        page.wait_for_function(f"() => ({state})() === 'done'", timeout=30_000)  # ~22 s scheduled
        generate_result(page, "preset")
        first = page.evaluate("() => window.__sources.length")
        assert first >= 1
        if silence_with == "cancel":
            page.locator("#preset-cancel").click()
        elif silence_with == "cancel on other tab":  # that tab's player is empty: no value change
            open_tab(page, TABS["instruct"])
            page.locator("#instruct-cancel").click()
        else:
            tab = "preset" if silence_with == "new job" else "instruct"
            page.get_by_role("tab", name=TABS[tab]).click()
            page.locator(f"#{tab}-text textarea").fill("Now something else.")
            page.locator(f"#{tab}-generate").click()
        page.wait_for_function(f"() => window.__sources.slice(0, {first})"
                               ".every(s => s.__stopped || s.__ended)", timeout=10_000)
    finally:
        context.close()


def generate_result(page, tab: str, timeout_ms: int = 60_000) -> tuple[bytes, str]:
    """The finished WAV behind the download player and the panel, once the job is done."""
    page.locator(f"#{tab}-output audio[src]").first.wait_for(state="attached", timeout=timeout_ms)
    href = page.locator(f"#{tab}-output a[download]").first.get_attribute("href", timeout=10_000)
    data = page.evaluate("""async (url) => Array.from(new Uint8Array(await (await fetch(url)).arrayBuffer()))""",
                         href)
    page.locator(f"#{tab}-panel").get_by_text("Engine / 引擎").first.wait_for(timeout=10_000)
    return bytes(data), page.locator(f"#{tab}-panel").inner_text()


def test_ui_works_behind_credentials(browser, make_service, live_server, web_settings):
    service = make_service(dataclasses.replace(web_settings, auth="teacher:s3cret"))
    server = live_server(service, with_ui=True)
    context, page, requests = open_page(browser, server.url,
                                        http_credentials={"username": "teacher", "password": "s3cret"})
    try:
        data, _ = generate(page, "preset", "Behind a password.")
        assert data[:4] == b"RIFF"
        # the live player's own request for the stream passes the same credentials
        page.wait_for_function("() => document.querySelector('#preset-live [data-state]').dataset.state"
                               " === 'done'", timeout=20_000)
        assert float(page.locator("#preset-live [data-scheduled]").get_attribute("data-scheduled")) > 0.1
    finally:
        context.close()
    assert_all_local(requests, server.url)
    assert httpx.get(server.url).status_code == 401


def test_real_engine_clone_tab_says_what_it_did(browser, web_settings, live_server, tmp_path,
                                                kokoro_models_dir):
    """The embedded Kokoro engine behind the page: a prompt upload is answered honestly."""
    import numpy as np
    import soundfile as sf

    from cosyedge.service.facade import Service

    service = Service(dataclasses.replace(web_settings, models_dir=kokoro_models_dir))
    service.start()
    server = live_server(service, with_ui=True)
    prompt = tmp_path / "prompt.wav"
    t = np.arange(48000) / 16000
    sf.write(prompt, 0.2 * np.sin(2 * np.pi * 180 * t), 16000)
    context, page, requests = open_page(browser, server.url)
    try:
        open_tab(page, TABS["clone"])
        page.locator("#clone-prompt input[type=file]").set_input_files(str(prompt))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-consent input[type=checkbox]").check()
        # Kokoro cannot clone: the tab says how to get true cloning, the prompt picks its closest
        # built-in voice (well under a second), and the panel names it with the similarity measured
        # on the audio returned
        ability = page.locator("#clone-ability").inner_text()
        assert "cannot clone" in ability and "CosyVoice" in ability and "docs/models.md" in ability
        data, panel = generate(page, "clone", "[zh]今天天气真好[en]It's sunny today", timeout_ms=300_000)
        assert data[:4] == b"RIFF" and len(data) > 24000, "no real speech came back"
        assert "closest built-in voice / 最接近的内置音色: female" in panel and "kokoro" in panel
        assert "Similarity of this audio to the prompt (measured)" in panel and "estimate" not in panel
        page.screenshot(path=str(ARTIFACTS / "clone-kokoro.png"), full_page=True)
        data, panel = generate(page, "preset", "Hello from the classroom. 你好，同学们。")
        assert data[:4] == b"RIFF"
        page.screenshot(path=str(ARTIFACTS / "preset-kokoro.png"), full_page=True)
    finally:
        context.close()
        service.close()
    assert_all_local(requests, server.url)


def test_cancel_button_stops_the_job_between_sentences(browser, make_service, live_server,
                                                       fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.4
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        generate_preset(page, " ".join(f"Sentence {i}." for i in range(30)))
        deadline = time.monotonic() + 30
        while not (fake_factory.engine and fake_factory.engine.sentences_done >= 2):
            assert time.monotonic() < deadline, "generation never started"
            page.wait_for_timeout(50)
        page.locator("#preset-cancel").click()
        deadline = time.monotonic() + 10
        while service.queue.stats().running:
            assert time.monotonic() < deadline, "job still running after cancel"
            page.wait_for_timeout(50)
        assert fake_factory.engine.sentences_done <= 5
        assert service.queue.stats().waiting == 0
    finally:
        context.close()


def test_cancel_button_silences_the_live_player(browser, make_service, live_server, fake_factory):
    """Synthesis runs ahead of playback: after Cancel the seconds already scheduled must not play."""
    fake_factory.engine_kwargs["delay"] = 0.05   # ~0.6 s of audio per sentence made in 0.05 s
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.add_init_script(SOURCE_SPY)
        page.reload(wait_until="load")
        generate_preset(page,
            " ".join(f"Sentence number {i} is here and it is fairly long." for i in range(60)))
        page.wait_for_function("() => parseFloat(document.querySelector('#preset-live [data-scheduled]')"
                               "?.dataset.scheduled || '0') > 4", timeout=30_000)
        page.locator("#preset-cancel").click()
        page.wait_for_function("() => window.__sources.length > 0 && "
                               "window.__sources.every(s => s.__stopped || s.__ended)", timeout=2_000)
    finally:
        context.close()


def test_closing_the_page_cancels_its_job(browser, make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.4
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    generate_preset(page, " ".join(f"Sentence {i}." for i in range(40)))
    deadline = time.monotonic() + 30
    while not (fake_factory.engine and fake_factory.engine.sentences_done >= 1):
        assert time.monotonic() < deadline, "generation never started"
        page.wait_for_timeout(50)
    context.close()  # the teacher closes the tab
    deadline = time.monotonic() + 30
    while service.queue.stats().running:
        assert time.monotonic() < deadline, "job still running 30 s after the page closed"
        time.sleep(0.1)
    assert fake_factory.engine.sentences_done < 40


def toast_texts(page) -> list[str]:
    """The texts of the toasts now on the page."""
    return page.locator(".toast-body").all_inner_texts()


def test_save_voice_tells_why_not_and_confirms(browser, make_service, live_server, tmp_path):
    """Save with no prompt, then with an empty name, then without the consent box: a toast each with
    the reason; then saved, with the consent recorded."""
    import numpy as np
    import soundfile as sf

    service = make_service()
    server = live_server(service, with_ui=True)
    prompt = tmp_path / "prompt.wav"
    sf.write(prompt, 0.2 * np.sin(2 * np.pi * 200 * np.arange(64000) / 16000), 16000)
    context, page, _ = open_page(browser, server.url)
    try:
        page.locator("#clone-save-name textarea, #clone-save-name input").first.fill("Ms Lee")
        page.locator("#clone-save").click()
        page.locator(".toast-body", has_text="Record or upload 3-10 s").wait_for(timeout=15_000)
        assert any("Cannot save the voice / 无法保存音色" in t for t in toast_texts(page)), toast_texts(page)
        # a refused save is a warning toast, not a failed event marking the voice dropdowns "Error"
        assert page.get_by_text("Error", exact=True).count() == 0
        page.locator("#clone-prompt input[type=file]").set_input_files(str(prompt))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-save-name textarea, #clone-save-name input").first.fill("")
        page.locator("#clone-save").click()
        page.locator(".toast-body", has_text="Type a name").wait_for(timeout=15_000)
        page.locator("#clone-save-name textarea, #clone-save-name input").first.fill("Ms Lee")
        page.locator("#clone-save").click()
        page.locator(".toast-body", has_text="needs your confirmation that the speaker").wait_for(timeout=15_000)
        assert service.voices()["saved"] == []
        page.locator("#clone-consent input[type=checkbox]").check()
        page.locator("#clone-save").click()
        page.locator(".toast-body", has_text="Saved / 已保存: Ms Lee").wait_for(timeout=15_000)
        assert [v["name"] for v in service.voices()["saved"]] == ["Ms Lee"]
        assert service.library.list()[0].consent is not None
        page.screenshot(path=str(ARTIFACTS / "clone-saved.png"), full_page=True)
    finally:
        context.close()


def test_a_refused_generate_leaves_the_last_result_playable(browser, make_service, live_server):
    """Generate with empty text after a good result: the reason in a toast; the player keeps the
    last result with no "Error" badge over it (the failed event put one on each of the three
    outputs; now progress and the error mark show on the panel alone)."""
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        generate_preset(page, "Keep this audio.")
        _, panel = generate_result(page, "preset")
        page.locator("#preset-text textarea").fill("")
        page.locator("#preset-generate").click()
        page.locator(".toast-body", has_text="Type some text").wait_for(timeout=15_000)
        page.wait_for_timeout(1_000)
        for output in ("#preset-output", "#preset-live"):
            assert page.locator(output).get_by_text("Error", exact=True).count() == 0, output
        assert page.locator("#preset-output audio[src]").count() >= 1
        assert panel in page.locator("#preset-panel").inner_text()
    finally:
        context.close()


def test_an_error_reason_stays_on_the_page(browser, make_service, live_server):
    """Gradio's toasts go after 10 s by default; the reason must still be there after that."""
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        generate_preset(page, "<speak>Hello</speak>")
        reason = page.locator(".toast-body", has_text="SSML tags are not supported")
        reason.wait_for(timeout=15_000)
        page.wait_for_timeout(11_000)
        assert reason.is_visible(), "the reason disappeared"
    finally:
        context.close()


def test_panel_shows_instruction_as_text_and_cancel_confirms(browser, make_service, live_server,
                                                              fake_factory):
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    hostile = "<img src=x onerror=alert(1)> **bold** [click](http://example.com)"
    try:
        open_tab(page, TABS["instruct"])
        page.locator("#instruct-instruction textarea").fill(hostile)
        _, panel = generate(page, "instruct", "Hello.")
        assert hostile in panel and "nothing applied" in panel
        assert page.locator("#instruct-panel img, #instruct-panel a, #instruct-panel strong",
                            has_text="bold").count() == 0
        assert page.locator("#instruct-panel img").count() == 0
        assert page.locator("#instruct-panel a").count() == 0
        from playwright.sync_api import expect

        # known once the engine has loaded (the first job): the status refresh brings it
        expect(page.locator("#instruct-ability")).to_contain_text("cannot follow instructions",
                                                                  timeout=10_000)

        fake_factory.engine.delay = 0.4
        generate_preset(page, " ".join(f"Sentence {i}." for i in range(30)))
        deadline = time.monotonic() + 30
        while fake_factory.engine.sentences_done < 2 + 1:
            assert time.monotonic() < deadline, "generation never started"
            page.wait_for_timeout(50)
        page.locator("#preset-cancel").click()
        page.locator("#preset-panel", has_text="Cancelled / 已取消").wait_for(timeout=10_000)
        page.wait_for_timeout(500)
        assert page.get_by_text("Error", exact=True).count() == 0, "cancel left red Error badges"
        page.screenshot(path=str(ARTIFACTS / "cancelled.png"), full_page=True)
    finally:
        context.close()
