"""Real-browser tests of the studio tabs (Models, My voices, History): Debian chromium driven by
playwright, headless, never a downloaded browser (the fixture and page helpers are test_browser's).

Each test does what a teacher does on the page and checks the service's state after it: pick a
model (and be refused, with the reason, while a job runs), save + rename + export + delete a voice
(and be refused a zip with a path outside its folder), replay and download a history item.
Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile

import numpy as np
import pytest
import soundfile as sf

from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.model_folders import COSYVOICE_LICENCE, make_model
from tests.helpers.waiting import wait_until
from tests.web.test_browser import ARTIFACTS, TABS, browser, generate, open_page, open_tab, toast_texts  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STUDIO_TABS = {"models": "Models / 模型", "voices": "My voices / 我的音色", "history": "History / 历史"}


def choose(page, elem_id: str, option: str) -> None:
    """Pick ``option`` in the Gradio dropdown ``#elem_id``."""
    page.locator(f"#{elem_id} input").first.click()
    page.get_by_role("option", name=option).first.click()


def fetch_bytes(page, url: str) -> bytes:
    """GET ``url`` from inside the page (same origin, same credentials)."""
    return bytes(page.evaluate("""async (url) => {
        const buf = new Uint8Array(await (await fetch(url)).arrayBuffer());
        return Array.from(buf);
    }""", url))


class GatedEngine(FakeEngine):
    """A fake engine whose synthesis waits for ``gate`` (a job that runs as long as the test needs)."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def synthesize(self, *args, **kwargs):
        assert self.gate.wait(30)
        yield from super().synthesize(*args, **kwargs)


def test_pick_a_model_and_be_told_why_not_while_a_job_runs(browser, make_service, live_server, web_settings):
    from playwright.sync_api import expect

    make_model(web_settings.models_path, "kokoro-int8")
    make_model(web_settings.models_path, "cosyvoice2-int8", engine="cosyvoice2", licence=COSYVOICE_LICENCE)
    gate = threading.Event()
    gate.set()
    service = make_service(factory=lambda: GatedEngine(gate))
    server = live_server(service, with_ui=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.get_by_role("tab", name=STUDIO_TABS["models"]).click()
        table = page.locator("#models-table")
        expect(table).to_contain_text("cosyvoice2-int8", timeout=15_000)
        expect(table).to_contain_text("weights: Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B)")
        expect(table).to_contain_text("clones a voice; follows instructions")
        expect(table).to_contain_text("kokoro-int8 (serving / 使用中)")
        page.screenshot(path=str(ARTIFACTS / "models.png"), full_page=True)

        choose(page, "models-choice", "cosyvoice2-int8")
        page.locator("#models-switch").click()
        expect(page.locator("#models-result")).to_contain_text("Now serving cosyvoice2-int8", timeout=15_000)
        assert service.settings.model == "cosyvoice2-int8"
        expect(table).to_contain_text("cosyvoice2-int8 (serving / 使用中)")
        # the other tabs follow: the clone tab now says the model clones
        expect(page.locator("#clone-ability")).to_contain_text("cosyvoice2", timeout=15_000)

        gate.clear()
        job = service.submit(TTSRequest(text="Someone else's lesson."))
        wait_until(lambda: service.queue.stats().running == 1, what="the job running")
        choose(page, "models-choice", "kokoro-int8")
        page.locator("#models-switch").click()
        page.locator(".toast-body", has_text="cannot switch to 'kokoro-int8' now").wait_for(timeout=15_000)
        text = " ".join(toast_texts(page))
        assert "Cannot switch the model / 无法切换模型" in text and "1 job(s) running" in text
        assert "完成后才能切换模型" in text  # the page's Chinese for the code
        page.screenshot(path=str(ARTIFACTS / "models-busy.png"), full_page=True)
        assert service.settings.model == "cosyvoice2-int8"
        gate.set()
        assert job.wait(15) and job.outcome().audio.size  # the other user's job was not lost
    finally:
        gate.set()
        context.close()


def test_save_rename_play_export_use_and_delete_a_voice(browser, make_service, live_server, tmp_path):
    from playwright.sync_api import expect

    service = make_service()
    server = live_server(service, with_ui=True)
    prompt = tmp_path / "prompt.wav"
    sf.write(prompt, 0.2 * np.sin(2 * np.pi * 200 * np.arange(80000) / 16000), 16000)
    context, page, _ = open_page(browser, server.url)
    try:
        # save from the clone tab, as a teacher does
        page.locator("#clone-prompt input[type=file]").set_input_files(str(prompt))
        page.locator("#clone-prompt audio[src]").first.wait_for(state="attached", timeout=30_000)
        page.locator("#clone-consent input[type=checkbox]").check()
        page.locator("#clone-save-name textarea, #clone-save-name input").first.fill("Ms Lee")
        page.locator("#clone-save").click()
        page.locator(".toast-body", has_text="Saved / 已保存: Ms Lee").wait_for(timeout=15_000)

        page.get_by_role("tab", name=STUDIO_TABS["voices"]).click()
        table = page.locator("#voices-table")
        expect(table).to_contain_text("Ms Lee", timeout=15_000)
        expect(table).to_contain_text("5.0 s")
        expect(table).to_contain_text("none recorded")
        expect(table).to_contain_text("consent given")  # the clone tab's box, recorded with the voice
        choose(page, "voices-choice", "Ms Lee (ms-lee)")
        page.locator("#voices-recording audio[src]").first.wait_for(state="attached", timeout=15_000)
        recording = page.locator("#voices-recording a[download]").first.get_attribute("href", timeout=10_000)
        assert fetch_bytes(page, recording)[:4] == b"RIFF"

        name_box = page.locator("#voices-new-name textarea, #voices-new-name input").first
        expect(name_box).to_have_value("Ms Lee", timeout=10_000)
        name_box.fill("Teacher Lee")
        page.locator("#voices-rename").click()
        expect(page.locator("#voices-message")).to_contain_text("Renamed / 已重命名: Teacher Lee", timeout=15_000)
        expect(table).to_contain_text("Teacher Lee")
        assert [v.name for v in service.saved_voices()] == ["Teacher Lee"]

        page.locator("#voices-export").click()
        link = page.locator("#voices-exported a").first
        link.wait_for(timeout=15_000)
        data = fetch_bytes(page, link.get_attribute("href"))
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            assert sorted(zf.namelist()) == ["meta.json", "transcript.txt", "voice.wav"]
            meta = json.loads(zf.read("meta.json"))
            assert meta["name"] == "Teacher Lee" and meta["consent"]["given_at"] > 0
        page.screenshot(path=str(ARTIFACTS / "voices.png"), full_page=True)

        page.locator("#voices-use").click()
        expect(page.locator("#clone-saved input").first).to_have_value("Teacher Lee (saved / 已保存)",
                                                                       timeout=15_000)
        assert page.get_by_role("tab", name=TABS["clone"]).get_attribute("aria-selected") == "true"
        _, panel = generate(page, "clone", "Good morning, class.")  # the prompt was cleared: the saved voice speaks
        assert "saved voice Teacher Lee" in panel

        page.get_by_role("tab", name=STUDIO_TABS["voices"]).click()
        expect(table).to_contain_text("fake/fake-sine", timeout=15_000)  # now encoded for the model used
        page.locator("#voices-delete").click()
        expect(page.locator("#voices-confirm")).to_contain_text("cannot be undone", timeout=10_000)
        page.locator("#voices-delete-no").click()  # it asks; keeping it keeps it
        expect(page.locator("#voices-confirm")).to_be_hidden(timeout=10_000)
        assert [v.name for v in service.saved_voices()] == ["Teacher Lee"]
        page.locator("#voices-delete").click()
        page.locator("#voices-delete-yes").click()
        expect(page.locator("#voices-message")).to_contain_text("Deleted / 已删除: teacher-lee", timeout=15_000)
        expect(table).not_to_contain_text("Teacher Lee")
        assert service.saved_voices() == []

        # the exported zip comes back in with the same checks as the CLI
        exported = tmp_path / "teacher-lee.voice.zip"
        exported.write_bytes(data)
        page.locator("#voices-import-file input[type=file]").set_input_files(str(exported))
        page.locator("#voices-import").click()
        expect(page.locator("#voices-message")).to_contain_text("Imported / 已导入: Teacher Lee", timeout=15_000)
        assert [v.name for v in service.saved_voices()] == ["Teacher Lee"]
        assert service.saved_voices()[0].consent.given_at == meta["consent"]["given_at"]
        expect(table).to_contain_text("consent given")
    finally:
        context.close()


def test_a_voice_zip_with_a_path_outside_its_folder_is_refused(browser, make_service, live_server, tmp_path):
    from playwright.sync_api import expect

    service = make_service()
    server = live_server(service, with_ui=True)
    buf = io.BytesIO()
    wav = io.BytesIO()
    sf.write(wav, 0.2 * np.sin(2 * np.pi * 200 * np.arange(64000) / 16000), 16000, format="WAV")
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../voice.wav", wav.getvalue())
        zf.writestr("transcript.txt", "hello")
        zf.writestr("meta.json", json.dumps({"format": 1, "name": "Escape", "engine": "kokoro",
                                             "model_id": "kokoro-int8"}))
    evil = tmp_path / "inner" / "evil.voice.zip"
    evil.parent.mkdir()
    evil.write_bytes(buf.getvalue())
    context, page, _ = open_page(browser, server.url)
    try:
        page.get_by_role("tab", name=STUDIO_TABS["voices"]).click()
        good = tmp_path / "lee.voice.zip"  # first a voice that comes in, so the message line says so
        good.write_bytes(service.export_voice(service.save_voice("Ms Lee", wav.getvalue(), "hello",
                                                                 consent=True).id))
        service.delete_voice("ms-lee")
        page.locator("#voices-import-file input[type=file]").set_input_files(str(good))
        page.locator("#voices-import").click()
        expect(page.locator("#voices-message")).to_contain_text("Imported / 已导入: Ms Lee", timeout=15_000)
        service.delete_voice("ms-lee")
        page.locator("#voices-import-file button[aria-label='Clear']").first.click()  # the box shows the last file
        page.locator("#voices-import-file input[type=file]").set_input_files(str(evil))
        page.locator("#voices-import").click()
        page.locator(".toast-body", has_text="not a voice file").wait_for(timeout=15_000)
        # the refusal does not stand beside the earlier "Imported" line
        expect(page.locator("#voices-message")).not_to_contain_text("Imported", timeout=5_000)
        assert "../voice.wav" in " ".join(toast_texts(page))
        assert service.saved_voices() == []
        assert sorted(p.name for p in (tmp_path / "inner").iterdir()) == ["evil.voice.zip"]
        assert not (tmp_path / "voice.wav").exists() and not (tmp_path / "prompts" / "voice.wav").exists()
    finally:
        context.close()


def test_replay_and_download_a_history_item(browser, make_service, live_server, web_settings):
    from playwright.sync_api import expect

    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        made, _ = generate(page, "preset", "The history of the moon. Second sentence.")
        open_tab(page, STUDIO_TABS["history"])  # with the Pronunciation tab, History may be under "More tabs"
        notice = page.locator("#history-notice")
        expect(notice).to_contain_text("Shared by everyone on this box", timeout=15_000)
        expect(notice).to_contain_text("stored on the box")
        expect(notice).to_contain_text("kept up to 24 h, at most 500 outputs and 1024 MB in all")
        table = page.locator("#history-table")
        expect(table).to_contain_text("The history of the moon. Second sentence.")
        expect(table).to_contain_text("female_1")
        expect(table).to_contain_text("fake-sine")
        entry = service.history()[0]
        page.locator("#history-choice input").first.click()
        page.get_by_role("option").filter(has_text="The history of the moon").first.click()
        page.locator("#history-player audio[src]").first.wait_for(state="attached", timeout=15_000)
        href = page.locator("#history-player a[download]").first.get_attribute("href", timeout=10_000)
        replayed = fetch_bytes(page, href)
        assert replayed == entry.path.read_bytes() == made
        assert entry.path.resolve() in service.in_use_paths()  # leased while it is downloaded
        page.screenshot(path=str(ARTIFACTS / "history.png"), full_page=True)
    finally:
        context.close()
