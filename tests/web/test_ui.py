"""UI handlers without a browser: busy becomes gr.Error, progress and the report panel."""

from __future__ import annotations

import asyncio
import dataclasses
import html
from types import SimpleNamespace

import pytest

from cosyedge.service import TTSRequest
from cosyedge.web.ui import build_ui, queue_settings, run_request


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
    import gradio  # noqa: F401  # its first import (seconds, inside _follow) would outlast the jobs

    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service(dataclasses.replace(web_settings, concurrency=1))
    service.submit(TTSRequest(text="One. Two."))
    progress = Progress()
    tts = TTSRequest(text="Three. Four. Five.", keep_file=True)
    path, panel = asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="a"), progress))
    descs = [d for _, d in progress.calls if d]
    assert any("position 1" in d for d in descs), descs
    sentences = [d for d in descs if "sentence" in d]
    assert sentences and all("第" in d and "句" in d for d in sentences), sentences  # both languages
    assert sentences[-1] == "sentence 3/3 / 第 3/3 句", sentences  # the one being made, never 4/3
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


# --- session 4: the reviewer's walkthrough (feedback, lasting errors, panel wording) ----------------

def wav_path(tmp_path, seconds: float, name: str = "prompt.wav") -> str:
    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * 16000)) / 16000
    path = tmp_path / name
    sf.write(path, 0.2 * np.sin(2 * np.pi * 200 * t), 16000)
    return str(path)


def handler(demo, name: str):
    """The event wired to the function called ``name`` in the built page."""
    found = [f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == name]
    assert len(found) == 1, f"{len(found)} events call {name}"
    return found[0]


def test_save_voice_is_queued_so_its_toasts_reach_the_page(make_service):
    """Unqueued, Gradio answers a gr.Error with a bare HTTP 500 and drops gr.Info: no feedback."""
    assert handler(build_ui(make_service()), "save_voice").queue is True


@pytest.mark.parametrize("prompt_s, name, reason", [
    (None, "Ms Lee", "Record or upload 3-10 s of a voice first / 请先录制或上传"),
    (4.0, "  ", "Type a name to save the voice as / 请输入音色名称"),
    (4.0, "../../etc", "may not contain"),
    (2.0, "Short", "at least 3 s"),
])
def test_save_refusals_name_the_reason_and_stay(make_service, tmp_path, prompt_s, name, reason):
    import gradio as gr

    from cosyedge.web.ui import CANNOT_SAVE, save_prompt

    service = make_service()
    prompt = wav_path(tmp_path, prompt_s) if prompt_s else None
    with pytest.raises(gr.Error) as info:
        save_prompt(service, prompt, "", name)
    assert reason in info.value.message and info.value.message.startswith(CANNOT_SAVE)
    assert info.value.duration is None  # stays until closed
    assert service.voices()["saved"] == []


def test_save_confirms_with_the_name(make_service, tmp_path):
    from cosyedge.web.ui import SAVED_PREFIX, save_prompt

    service = make_service()
    value, confirmation = save_prompt(service, wav_path(tmp_path, 4.0), "hello", " Ms Lee ")
    saved = service.voices()["saved"]
    assert len(saved) == 1 and value == SAVED_PREFIX + saved[0]["id"]
    assert confirmation == f"Saved / 已保存: {saved[0]['name']}" and "Ms Lee" in confirmation


def test_errors_stay_until_closed_and_empty_text_is_bilingual(make_service):
    import gradio as gr

    from cosyedge.errors import BusyError, TextError
    from cosyedge.web.ui import CANNOT_GENERATE, EMPTY_TEXT, _ui_error, stream_request

    assert _ui_error(TextError("text is empty")).duration is None
    # the toast renders HTML: a reason quoting the user's markup must show it, not drop it
    assert "(&lt;speak&gt;)" in _ui_error(TextError("text contains markup (<speak>)")).message
    busy = _ui_error(BusyError("the queue is full", retry_after=5))
    assert busy.duration is None and "约 5 秒后重试" in busy.message

    async def empty():
        async for _ in stream_request(make_service(), TTSRequest(text="  "), None, Progress()):
            pass

    with pytest.raises(gr.Error) as info:
        asyncio.run(empty())
    assert info.value.message == f"{CANNOT_GENERATE}: {EMPTY_TEXT}" and info.value.duration is None


def result_with(**fields):
    import numpy as np

    from cosyedge.service import TTSResult

    base = dict(job_id="j", audio=np.zeros(2400, dtype=np.float32), sample_rate=24000, engine="kokoro",
                model_id="kokoro-int8", voice="female_1", voice_match="preset",
                instruct={"applied": [], "not_supported": [], "message": "no instruction given"},
                sentences=1, seconds=0.5)
    base.update(fields)
    return TTSResult(**base)


def test_panel_shows_user_text_as_text():
    from cosyedge.instruct import plan
    from cosyedge.engines.base import Capabilities
    from cosyedge.web.ui import describe

    hostile = "<img src=x onerror=alert(1)> **bold** _it_ [click](http://example.com) www.example.com"
    caps = Capabilities(native_clone=False, native_instruct=False, languages=("auto",), sample_rate=24000)
    panel = describe(result_with(voice=f"saved voice {hostile}", instruct=plan(hostile, caps).to_dict()))
    user = _user_part(panel)
    for markup in ("<img", "<", "**", "_it_", "](", "http://", "www."):
        assert markup not in user, f"{markup!r} reaches the page as markup"
    assert hostile in html.unescape(panel)  # still all there, as text


def _user_part(panel: str) -> str:
    """The panel without the labels the UI itself writes in bold."""
    import re

    return re.sub(r"\*\*[^*<>\[\]]+\*\*", "", panel)


def test_panel_says_which_similarity_was_measured_on_this_audio():
    from cosyedge.notes import Note
    from cosyedge.web.ui import describe

    match = Note("approximate voice match: similarity 0.31 (nearest preset female_1) -> 0.50",
                 code="voice_match_approx", method="approximate voice match", before=0.31,
                 nearest="female_1", after=0.50)
    panel = describe(result_with(voice="prompt audio", similarity=0.49, voice_match=match))
    voice_line = next(line for line in panel.split("\n\n") if "Voice / 音色" in line)
    measured = next(line for line in panel.split("\n\n") if "0.49" in line)
    assert "estimate" in voice_line and "not this audio" in voice_line
    assert "measured" in measured and "this audio" in measured and "0.88-0.93" in measured
    assert "estimate" not in describe(result_with())  # a preset has no search figures


def test_panel_lists_text_not_read_and_fields_ignored():
    from cosyedge.notes import Note
    from cosyedge.web.ui import describe

    skipped = ["5 Hangul characters not read (<b>안녕하세요</b>)"]
    notes = [Note("prompt_text ignored: the kokoro engine cannot clone; it matches the voice from the sound "
                  "of prompt_audio alone, without its transcript", code="prompt_text_ignored_no_clone",
                  engine="kokoro")]
    panel = describe(result_with(skipped=skipped, notes=notes))
    not_read = next(line for line in panel.split("\n\n") if "Not read aloud / 未朗读" in line)
    ignored = next(line for line in panel.split("\n\n") if "Ignored / 已忽略" in line)
    assert "<b>" not in not_read and "안녕하세요" in not_read  # user text, shown as text
    # in the page's words, not the REST field names
    assert "the prompt transcript ignored: the kokoro engine cannot clone; it matches the voice" in ignored
    assert "from the sound of the prompt audio alone" in ignored
    assert "prompt_text" not in ignored and "prompt_audio" not in ignored
    plain_panel = describe(result_with())
    assert "Not read aloud" not in plain_panel and "Ignored" not in plain_panel


def test_unknown_instruction_panel_says_one_thing():
    from cosyedge.engines.base import Capabilities
    from cosyedge.instruct import plan
    from cosyedge.web.ui import describe

    caps = Capabilities(native_clone=False, native_instruct=False, languages=("auto",), sample_rate=24000)
    panel = describe(result_with(instruct=plan("asdfgh", caps).to_dict()))
    assert "nothing applied" in panel and "applied as explicit controls" not in panel


def test_cancel_confirms(make_service, fake_factory):
    from cosyedge.errors import CancelledError
    from cosyedge.web.ui import CANCELLED, cancel_session

    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service()
    request = SimpleNamespace(session_hash="c")
    assert cancel_session(service, request) is None  # nothing running: the panel is left as it is
    job = service.submit(TTSRequest(text="One. Two. Three. Four."), owner="ui:c")
    assert cancel_session(service, request) == CANCELLED
    assert job.wait(10)
    with pytest.raises(CancelledError):
        job.outcome()


@pytest.mark.parametrize("native", [False, True])
def test_capabilities_shown_from_the_engine(make_service, fake_factory, native):
    from cosyedge.web.ui import capability_notes

    fake_factory.engine_kwargs.update(native_clone=native, native_instruct=native)
    service = make_service()
    before = capability_notes(service)
    assert all("once the model has loaded" in note for note in before)
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    clone_note, instruct_note = capability_notes(service)
    assert ("cannot clone" in clone_note) is not native and "fake" in clone_note
    assert ("cannot follow instructions" in instruct_note) is not native


def test_progress_says_the_voice_is_being_prepared(make_service, tmp_path, monkeypatch):
    """The service's own phase while the prompt is matched shows in the page's words."""
    import time
    from pathlib import Path

    from cosyedge.web.ui import PREPARING_VOICE
    from tests.helpers.fake_engine import FakeEngine

    encode = FakeEngine.encode_prompt

    def slow_encode(self, audio, sample_rate, transcript, **options):  # a voice match takes seconds
        time.sleep(0.6)
        return encode(self, audio, sample_rate, transcript, **options)

    monkeypatch.setattr(FakeEngine, "encode_prompt", slow_encode)
    service = make_service()
    progress = Progress()
    tts = TTSRequest(text="One.", prompt_audio=Path(wav_path(tmp_path, 4.0)).read_bytes())
    asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="p"), progress))
    assert PREPARING_VOICE in [d for _, d in progress.calls]


def test_a_cancelled_event_frees_its_jobs_place_in_the_queue_at_once(make_service, web_settings,
                                                                       fake_factory):
    """Gradio cancelling a generate event whose job still waits takes the job out of the queue."""
    from cosyedge.jobs import JobState

    fake_factory.engine_kwargs["delay"] = 0.5
    service = make_service(dataclasses.replace(web_settings, concurrency=1))
    running = service.submit(TTSRequest(text="One. Two. Three. Four. Five. Six."))

    async def cancelled_event() -> None:
        task = asyncio.ensure_future(run_request(service, TTSRequest(text="Hi."),
                                                 SimpleNamespace(session_hash="w"), Progress()))
        while not service.queue.jobs_of("ui:w"):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_event())
    try:
        assert service.queue.stats().waiting == 0, "the cancelled event's job still waits"
        assert [j.state for j in service.queue.active_jobs()] == [JobState.RUNNING]
    finally:
        service.cancel(running.id)


def test_a_prompt_gone_from_gradios_cache_is_a_clear_error(make_service, live_server, tmp_path):
    """A page left open past the cache's sweep still names the upload: Generate used to answer the
    raw "[Errno 2] No such file or directory: '/tmp/gradio/...'"."""
    import json
    import os

    import httpx

    from cosyedge.web.ui import PROMPT_GONE

    server = live_server(make_service(), with_ui=True)
    with open(wav_path(tmp_path, 4.0), "rb") as upload:
        served = httpx.post(server.url + "/gradio_api/upload", files={"files": upload}).json()[0]

    def generate() -> str:
        data = [{"path": served, "meta": {"_type": "gradio.FileData"}}, "", "Hello.", None, 1.0, "auto"]
        event = httpx.post(server.url + "/gradio_api/call/clone", json={"data": data}).json()["event_id"]
        return httpx.get(f"{server.url}/gradio_api/call/clone/{event}", timeout=60).text

    assert "event: complete" in generate()
    os.remove(served)
    answer = generate()
    assert "event: error" in answer and "Errno" not in answer, answer
    error = json.loads(answer.split("event: error", 1)[1].split("data:", 1)[1].strip().splitlines()[0])
    assert html.unescape(error["error"]).endswith(PROMPT_GONE)


def test_common_refusals_carry_chinese_too(make_service):
    """The page is bilingual; the service's reasons are English: the commonest get their Chinese."""
    from cosyedge.web.ui import run_request

    service = make_service()
    with pytest.raises(Exception) as info:
        asyncio.run(run_request(service, TTSRequest(text="x" * 5001), SimpleNamespace(session_hash="z"),
                                Progress()))
    assert "the limit is 5000" in info.value.message and "文本有 5001 个字符，上限为 5000 个" in info.value.message
    with pytest.raises(Exception) as info:
        asyncio.run(run_request(service, TTSRequest(text="<speak>hi</speak>"),
                                SimpleNamespace(session_hash="z"), Progress()))
    assert "不支持 SSML 标签" in info.value.message
