"""Real-browser test of the speed-mode check's page part, on the tiny converted CosyVoice2 model
(random weights: the figures mean nothing, the page's flow is real). The Models tab's "Check speed
modes / 检查速度模式" button starts a check; the tab then shows each mode with its verdict and
figures; the generate tabs' quality control names each mode's verdict; after a reconversion (the
manifest's converter line changed: another model identity) both say the check is outdated.

Kept short: one English line (the check's flow is the same with more), heard by a stand-in
recognizer that hears that line (the real Whisper is exercised by tests/web/test_mode_check_tiny.py);
the speaker judge is the tiny model's own campplus.onnx.
"""

from __future__ import annotations

import json

import pytest

from cosyedge.catalog.manifest import MANIFEST_NAME
from cosyedge.config import Settings
from cosyedge.service import mode_check
from cosyedge.service.facade import Service
from cosyedge.web.mode_check_panel import NOT_CHECKED
from tests.helpers.fake_recognizer import FakeRecognizer
from tests.helpers.tiny_models import MODEL_ID
from tests.web.test_browser import TABS, browser, open_page, open_tab  # noqa: F401 - fixture
from tests.web.test_mode_check_tiny import linked_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODELS_TAB = "Models / 模型"
RESULT = "#models-check-result"


def test_models_tab_checks_the_modes_and_the_quality_control_shows_the_verdicts(
        browser, tiny_cosyvoice_models, tmp_path, live_server):  # noqa: F811
    from playwright.sync_api import expect

    models = linked_models({MODEL_ID: tiny_cosyvoice_models}, tmp_path / "models")
    settings = Settings(root=tmp_path, models_dir=models, model=MODEL_ID, onnx_threads=1, idle_unload_minutes=0,
                        thread_calibration=False, auto_mode_check=False).validate()
    line = mode_check.all_lines()["en"][0]
    service = Service(settings, recognizer=FakeRecognizer(text=line))  # hears the one line right
    service.start()
    service.mode_checks.per_language, service.mode_checks.languages = 1, ("en",)
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        open_tab(page, MODELS_TAB)
        expect(page.locator(RESULT)).to_contain_text(NOT_CHECKED.split(" / ")[0], timeout=10_000)
        page.locator("#models-check").click()
        # the panel is read again every CHECK_REFRESH_S: it shows the stored verdicts once the check ends
        expect(page.locator(RESULT)).to_contain_text("Checked on this model on", timeout=120_000)
        assert service.mode_check()["status"]["state"] == "done"
        table = page.locator(f"{RESULT} table")
        for mode in ("balanced", "live"):
            row = table.locator("tr", has_text=mode).inner_text()
            assert "recommended" in row, row  # "recommended on this model" or "not recommended; <why>"
            assert "×" in row and " dB" in row and "+0.0" in row, row  # duration, mel distance, points
        assert "preset / 预设" in page.locator(RESULT).inner_text() and "campplus" in page.locator(RESULT).inner_text()

        open_tab(page, TABS["preset"])  # no reload: opening the tab reads the verdicts again
        quality = page.locator("#preset-quality")
        expect(quality).to_contain_text("on this model / 本模型", timeout=10_000)
        verdicts = service.mode_verdicts()
        for mode in ("balanced", "live"):
            said = "— recommended on this model" if verdicts[mode]["recommended"] else "— not recommended on this model"
            expect(quality.locator("label", has_text=mode)).to_contain_text(said)

        # a reconversion: the manifest's converter line changes, so the record is another identity's
        manifest_path = models / MODEL_ID / MANIFEST_NAME
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        manifest["converter"] = f"{manifest.get('converter')} (converted again)"
        manifest_path.unlink()  # a link into the shared build: replaced, not written through
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
        open_tab(page, MODELS_TAB)
        expect(page.locator(RESULT)).to_contain_text("The model changed since this check", timeout=10_000)
        assert "recommended on this model" not in page.locator(f"{RESULT} table").inner_text()
        open_tab(page, TABS["preset"])
        expect(quality.locator("label", has_text="live")).to_contain_text("check outdated", timeout=10_000)
    finally:
        context.close()
        service.close()
