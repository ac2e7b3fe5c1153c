"""UI handlers without a browser: busy becomes gr.Error, progress and the report panel."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from cosyedge.service import TTSRequest
from cosyedge.ui import build_ui, queue_settings, run_request


class Progress:
    def __init__(self) -> None:
        self.calls: list[tuple[object, str | None]] = []

    def __call__(self, value, desc=None):
        self.calls.append((value, desc))


def test_busy_is_a_gradio_error_with_retry_hint(make_service, web_settings, fake_factory):
    import gradio as gr

    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service(dataclasses.replace(web_settings, concurrency=1, queue_size=0))
    first = service.submit(TTSRequest(text="One. Two. Three."))

    async def second():
        return await run_request(service, TTSRequest(text="hi"), SimpleNamespace(session_hash="b"),
                                 Progress())

    with pytest.raises(gr.Error, match="busy"):
        asyncio.run(second())
    assert first.wait(10)


def test_progress_reports_position_then_sentences(make_service, web_settings, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service(dataclasses.replace(web_settings, concurrency=1))
    service.submit(TTSRequest(text="One. Two."))
    progress = Progress()
    tts = TTSRequest(text="Three. Four. Five.", keep_file=True)
    path, panel = asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="a"), progress))
    descs = [d for _, d in progress.calls if d]
    assert any("position 1" in d for d in descs)
    assert any("sentence" in d for d in descs)
    assert path and path.endswith(".wav")
    assert "3 sentence(s)" in panel and "female_1" in panel


def test_page_builds_and_queue_agrees_with_jobqueue(make_service):
    service = make_service()
    demo = build_ui(service)
    assert demo.title == "cosyedge"
    assert queue_settings(service) == {"max_size": 10, "default_concurrency_limit": 10}
    labels = {getattr(block, "label", None) for block in demo.blocks.values()}
    assert {"3s quick clone / 3秒极速复刻", "natural-language instruct / 自然语言控制",
            "preset voices / 预置音色"} <= labels
