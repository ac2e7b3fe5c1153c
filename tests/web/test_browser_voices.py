"""Real-browser tests of a voice's life on the page (Debian chromium via playwright, as
tests/web/test_browser.py): an import on the same CosyVoice model is used without encoding again
(timed on the tiny model), a voice already here makes the page ask, and a slow encoding moves the
progress bar step by step."""

from __future__ import annotations

import io
import time

import pytest
import soundfile as sf

from cosyedge.config import Settings
from cosyedge.service.requests import TTSRequest
from tests.helpers.tiny_models import MODEL_ID
from tests.test_audio_prompt import speechlike
from tests.web.test_browser import TABS, browser, open_page  # noqa: F401
from tests.web.test_browser_studio import STUDIO_TABS, choose

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def prompt_file(tmp_path, seconds: float = 4.0, seed: int = 0):
    path = tmp_path / f"prompt-{seed}.wav"
    sf.write(path, speechlike(seconds, seed=seed), 16000)
    return path


def generate_with_saved_voice(page, label: str) -> float:
    """Generate in the clone tab with a saved voice; the seconds from the click to the audio."""
    page.get_by_role("tab", name=TABS["clone"]).click()
    choose(page, "clone-saved", label)
    page.locator("#clone-text textarea").fill("Good morning, class.")
    started = time.monotonic()
    page.locator("#clone-generate").click()
    page.locator("#clone-panel").get_by_text("Engine / 引擎").first.wait_for(timeout=120_000)
    return time.monotonic() - started


def test_an_imported_voice_is_used_without_encoding_again(browser, tiny_cosyvoice_models,  # noqa: F811
                                                         tmp_path, live_server, capsys):
    """Export on the tiny CosyVoice model, delete, import through the page: the next answer reads the
    encoding that travelled (no prompt-cache miss); a second import of the same file asks first."""
    from playwright.sync_api import expect

    from cosyedge.service.facade import Service

    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model=MODEL_ID, onnx_threads=1,
                        idle_unload_minutes=0).validate()
    service = Service(settings)
    service.start()
    data = io.BytesIO()
    sf.write(data, speechlike(4.0), 16000, format="WAV")
    saved = service.save_voice("Ms Lee", data.getvalue(), "hello there", consent=True)
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        misses = service.prompt_cache.misses
        first = generate_with_saved_voice(page, "Ms Lee (saved / 已保存)")
        assert service.prompt_cache.misses == misses + 1  # encoded at its first use
        exported = tmp_path / "ms-lee.voice.zip"
        exported.write_bytes(service.export_voice(saved.id))
        service.delete_voice(saved.id)
        for entry in list(service.prompt_cache.directory.iterdir()):  # nothing left to find but what travels
            entry.unlink()
        page.reload(wait_until="load")
        page.get_by_role("tab", name=STUDIO_TABS["voices"]).click()
        page.locator("#voices-import-file input[type=file]").set_input_files(str(exported))
        page.locator("#voices-import").click()
        message = page.locator("#voices-message")
        expect(message).to_contain_text("Imported / 已导入: Ms Lee (ms-lee)", timeout=30_000)
        expect(message).to_contain_text(f"its encoding for cosyvoice2/{MODEL_ID} reused")
        misses = service.prompt_cache.misses
        page.reload(wait_until="load")
        again = generate_with_saved_voice(page, "Ms Lee (saved / 已保存)")
        assert service.prompt_cache.misses == misses, "the imported voice was encoded again"
        with capsys.disabled():
            print(f"\ntiny CosyVoice, click to panel: first use (encoded) {first:.2f} s, "
                  f"after import (reused) {again:.2f} s")

        # the same file again: its id is here, so the page asks before making a copy
        page.get_by_role("tab", name=STUDIO_TABS["voices"]).click()
        page.locator("#voices-import-file input[type=file]").set_input_files(str(exported))
        page.locator("#voices-import").click()
        question = page.locator("#voices-import-question")
        expect(question).to_contain_text("is on this box already", timeout=30_000)
        assert [v.id for v in service.saved_voices()] == ["ms-lee"]
        page.locator("#voices-import-copy").click()
        expect(message).to_contain_text("Imported / 已导入: Ms Lee 2 (ms-lee-2)", timeout=30_000)
        assert sorted(v.id for v in service.saved_voices()) == ["ms-lee", "ms-lee-2"]
        expect(page.locator("#voices-room")).to_contain_text("Room for about 98 more voices")
    finally:
        context.close()
        service.close()


def test_a_slow_encoding_moves_the_progress_bar_step_by_step(browser, make_service, live_server,  # noqa: F811
                                                             fake_factory, tmp_path):
    """A clone on an engine whose encoding takes 3 s in three steps: the page says each step with
    its count, and the panel says afterwards why the first audio came late."""
    fake_factory.engine_kwargs.update(native_clone=True, encode_delay=3.0)
    service = make_service()
    data = io.BytesIO()
    sf.write(data, speechlike(4.0, seed=1), 16000, format="WAV")
    assert service.submit(TTSRequest(text="Hi.", prompt_audio=data.getvalue(), prompt_text="hello",
                                     consent=True)).wait(30)  # the engine's pace is known from now on
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.locator("#clone-prompt input[type=file]").set_input_files(str(prompt_file(tmp_path, seed=2)))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-prompt-text textarea").fill("hello there")
        page.locator("#clone-consent input[type=checkbox]").check()
        page.locator("#clone-text textarea").fill("Good morning, class.")
        page.locator("#clone-generate").click()
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = page.locator("#clone-panel").inner_text()
            for step in (1, 2, 3):
                if f"preparing the voice: step {step} of 3" in text:
                    seen.add(f"{step}")
                    assert "正在准备音色" in text
            if "Engine / 引擎" in text:
                break
            page.wait_for_timeout(100)
        assert len(seen) >= 2, f"the bar did not move: steps seen {sorted(seen)}"
        panel = page.locator("#clone-panel")
        panel.get_by_text("Engine / 引擎").first.wait_for(timeout=30_000)
        assert "the voice was prepared first: 3 steps" in panel.inner_text()
        assert "先准备了音色：3 步" in panel.inner_text()
    finally:
        context.close()
