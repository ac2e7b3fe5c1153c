"""Real-browser tests of the live player with streamed CosyVoice hops and with slow audio.

Same setup as tests/web/test_browser.py (Debian chromium via playwright, headless). The CosyVoice
test runs the tiny converted model in process, with :class:`HopGate` holding the sentence's second
hop, so "playing before the job ends" is seen, not inferred from timing.
"""

from __future__ import annotations

import pytest

from cosyedge.config import Settings
from cosyedge.service.jobs import JobState
from tests.helpers.hop_gate import HopGate
from tests.helpers.tiny_models import MODEL_ID
from tests.web.test_browser import SOURCE_SPY, browser, generate_preset, open_page  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")
STATE = "document.querySelector('#preset-live [data-state]')?.dataset.state"  # a JS expression


def test_cosyvoice_job_plays_before_it_ends_and_cancel_silences_it(browser, tiny_cosyvoice_models,  # noqa: F811
                                                                   tmp_path, live_server, monkeypatch):
    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model=MODEL_ID, onnx_threads=1,
                        idle_unload_minutes=0).validate()
    from cosyedge.service.facade import Service
    service = Service(settings)
    service.start()
    with service.holder.use():
        pass  # load the model first, so the first hop's arrival rate is the synthesis's, not the load's
    gate = HopGate(timeout_s=30).install(monkeypatch)
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.add_init_script(SOURCE_SPY)
        page.reload(wait_until="load")
        generate_preset(page, TEXT)
        page.wait_for_function(f"() => {STATE} === 'playing'", timeout=30_000)
        jobs = service.queue.active_jobs()
        assert jobs and jobs[0].state == JobState.RUNNING, "the page played only after the job ended"
        assert gate.hops <= 2 and gate.released_in_time is None  # hop 1 plays, hop 2 not handed on
        started = page.evaluate("window.__sources.length")
        assert started >= 1
        page.locator("#preset-cancel").click()
        page.wait_for_function("() => window.__sources.every(s => s.__stopped || s.__ended)", timeout=5_000)
        gate.release()
        jobs[0].wait(30)
        assert jobs[0].state == JobState.CANCELLED
        page.wait_for_timeout(500)
        assert page.evaluate("window.__sources.length") == started  # nothing more was played
    finally:
        context.close()
        service.close()


def test_slow_audio_is_buffered_and_says_so(browser, make_service, live_server, fake_factory):  # noqa: F811
    """Audio made at ~0.6x real time: the player holds it, says "buffering N s / 缓冲中", then plays
    it without a gap (each piece starts where the previous one ends)."""
    fake_factory.engine_kwargs["delay"] = 0.6    # 0.36 s of audio (+ the pause) per 0.6 s
    service = make_service()
    server = live_server(service, with_ui=True)
    context, page, _ = open_page(browser, server.url)
    try:
        page.add_init_script(SOURCE_SPY.replace("window.__sources.push(this);",
                                                "window.__sources.push(this); this.__at = args[0];"))
        page.reload(wait_until="load")
        generate_preset(page, " ".join(f"Sentence number {i} is here." for i in range(6)))
        page.wait_for_function(f"() => {STATE} === 'buffering'", timeout=20_000)
        label = page.locator("#preset-live small").inner_text()
        assert "缓冲中" in label and label.startswith("buffering ") and " s / " in label
        assert float(page.locator("#preset-live [data-buffering]").get_attribute("data-buffering")) > 0
        assert page.evaluate("window.__sources.length") == 0  # nothing plays while it buffers
        page.wait_for_function(f"() => ['playing', 'done'].includes({STATE})", timeout=30_000)
        page.wait_for_function(f"() => {STATE} === 'done'", timeout=30_000)
        gaps = page.evaluate("""() => window.__sources.slice(1).map((s, i) =>
            s.__at - (window.__sources[i].__at + window.__sources[i].buffer.duration))""")
        assert gaps and max(gaps) < 0.06  # back to back (a stall would leave a gap)
    finally:
        context.close()
