"""UI handlers without a browser: busy becomes gr.Error, progress and the report panel."""

from __future__ import annotations

import asyncio
import dataclasses
import html
from pathlib import Path
from types import SimpleNamespace

import pytest

from cosyedge.service.requests import TTSRequest
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
    path, panel, captions = asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="a"), progress))
    descs = [d for _, d in progress.calls if d]
    assert any("position 1" in d for d in descs), descs
    sentences = [d for d in descs if "sentence" in d]
    assert sentences and all("第" in d and "句" in d for d in sentences), sentences  # both languages
    assert sentences[-1] == "sentence 3/3 / 第 3/3 句", sentences  # the one being made, never 4/3
    assert path and path.endswith(".wav")
    assert "3 sentence(s)" in panel and "female_1" in panel
    # the captions: listed in the panel with their times, and both files offered for download
    assert "**Captions / 字幕** (3 cue(s)" in panel and "` Four.\n" in panel + "\n"
    assert [Path(p).suffix for p in captions] == [".vtt", ".srt"] and Path(captions[0]).stem == Path(path).stem


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
        save_prompt(service, prompt, "", name, True)
    assert reason in info.value.message and info.value.message.startswith(CANNOT_SAVE)
    assert info.value.duration is None  # stays until closed
    assert service.voices()["saved"] == []


def test_the_clone_tab_refuses_prompt_audio_and_saving_without_the_consent_box(make_service, tmp_path):
    """The page's Gradio handlers, as the page calls them: unticked box -> a lasting bilingual error."""
    import gradio as gr

    from cosyedge.web.ui import CANNOT_SAVE, save_prompt

    service = make_service()
    prompt = wav_path(tmp_path, 4.0)
    with pytest.raises(gr.Error) as info:
        save_prompt(service, prompt, "", "Ms Lee", False)
    assert info.value.message.startswith(CANNOT_SAVE) and "speaker" in info.value.message
    assert "同意" in info.value.message and service.voices()["saved"] == []

    clone = handler(build_ui(service), "clone").fn

    async def generate(consent: bool) -> list:
        return [update async for update in clone(prompt, "", "Hello.", None, 1.0, "auto", consent, 10,
                                                 request=SimpleNamespace(session_hash="c"),
                                                 progress=Progress())]

    with pytest.raises(gr.Error) as info:
        asyncio.run(generate(False))
    assert "needs your confirmation that the speaker" in info.value.message and "同意" in info.value.message
    assert service.queue.stats().waiting == 0 and service.queue.stats().running == 0
    assert asyncio.run(generate(True))  # ticked: it runs


def test_save_confirms_with_the_name(make_service, tmp_path):
    from cosyedge.web.ui import SAVED_PREFIX, save_prompt

    service = make_service()
    value, confirmation = save_prompt(service, wav_path(tmp_path, 4.0), "hello", " Ms Lee ", True)
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

    from cosyedge.service.requests import TTSResult

    base = dict(job_id="j", audio=np.zeros(2400, dtype=np.float32), sample_rate=24000, engine="kokoro",
                model_id="kokoro-int8", voice="female_1", voice_match="preset",
                instruct={"applied": [], "not_supported": [], "message": "no instruction given"},
                sentences=1, seconds=0.5)
    base.update(fields)
    return TTSResult(**base)


def test_panel_shows_user_text_as_text():
    from cosyedge.instruct.plan import plan
    from cosyedge.engines.base import Capabilities
    from cosyedge.web.report_panel import describe

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


def test_panel_names_the_closest_built_in_voice_and_the_similarity_measured_on_this_audio():
    from cosyedge.engines.base import closest_builtin
    from cosyedge.notes import Note
    from cosyedge.web.report_panel import describe

    changed = Note("this voice sounds different from before: it was made by the approximate voice match, which "
                   "is gone; it is now the closest built-in voice female_2", code="voice_sound_changed",
                   before="approximate voice match", voice="female_2")
    panel = describe(result_with(voice="prompt audio", similarity=0.49, voice_match=closest_builtin("female_2"),
                                 notes=[changed]))
    voice_line = next(line for line in panel.split("\n\n") if "Voice / 音色" in line)
    measured = next(line for line in panel.split("\n\n") if "0.49" in line)
    assert "closest built-in voice / 最接近的内置音色: female&#95;2" in voice_line or \
        "closest built-in voice / 最接近的内置音色: female_2" in voice_line
    assert "measured" in measured and "this audio" in measured and "0.88-0.93" in measured
    assert "sounds different from before" in next(line for line in panel.split("\n\n") if "Voice note" in line)
    assert "Ignored" not in panel  # a voice note is no field ignored
    assert "estimate" not in panel


def test_panel_lists_text_not_read_and_fields_ignored():
    from cosyedge.notes import Note
    from cosyedge.web.report_panel import describe

    skipped = ["5 Hangul characters not read (<b>안녕하세요</b>)"]
    notes = [Note("prompt_text ignored: the kokoro engine cannot clone; it chooses the closest built-in voice "
                  "from the sound of prompt_audio alone", code="prompt_text_ignored_no_clone",
                  engine="kokoro")]
    panel = describe(result_with(skipped=skipped, notes=notes))
    not_read = next(line for line in panel.split("\n\n") if "Not read aloud / 未朗读" in line)
    ignored = next(line for line in panel.split("\n\n") if "Ignored / 已忽略" in line)
    assert "<b>" not in not_read and "안녕하세요" in not_read  # user text, shown as text
    # in the page's words, not the REST field names
    assert "the prompt transcript ignored: the kokoro engine cannot clone; it chooses the closest" in ignored
    assert "from the sound of the prompt audio alone" in ignored
    assert "prompt_text" not in ignored and "prompt_audio" not in ignored
    plain_panel = describe(result_with())
    assert "Not read aloud" not in plain_panel and "Ignored" not in plain_panel


def test_unknown_instruction_panel_says_one_thing():
    from cosyedge.engines.base import Capabilities
    from cosyedge.instruct.plan import plan
    from cosyedge.web.report_panel import describe

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


def test_v3_notes_and_languages_come_from_the_service(make_service, fake_factory, web_settings):
    """The page asks the service what the served engine follows and speaks (it imports no engine):
    the v3 instruct note by the manifest's engine name before any load, the languages of the
    loaded engine after it (auto/zh/en/ja, which every engine reads, before)."""
    import json

    from cosyedge.web.ui import capability_notes, language_choices

    fake_factory.engine_kwargs.update(native_clone=True, native_instruct=True,
                                      languages=("auto", "zh", "en", "ja", "ko", "fr"))
    service = make_service()
    web_settings.model_path.mkdir(parents=True, exist_ok=True)
    (web_settings.model_path / "manifest.json").write_text(json.dumps({"engine": "cosyvoice3"}))
    assert "Fun-CosyVoice3: dialects" in capability_notes(service)[1]
    assert [code for _, code in language_choices(service)] == ["auto", "zh", "en", "ja"]
    (web_settings.model_path / "manifest.json").write_text(json.dumps({"engine": "cosyvoice2"}))
    assert "Fun-CosyVoice3" not in capability_notes(service)[1]
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    assert [code for _, code in language_choices(service)] == ["auto", "zh", "en", "ja", "ko", "fr"]


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
    tts = TTSRequest(text="One.", consent=True, prompt_audio=Path(wav_path(tmp_path, 4.0)).read_bytes())
    asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="p"), progress))
    assert PREPARING_VOICE in [d for _, d in progress.calls]


def test_a_cancelled_event_frees_its_jobs_place_in_the_queue_at_once(make_service, web_settings,
                                                                       fake_factory):
    """Gradio cancelling a generate event whose job still waits takes the job out of the queue."""
    from cosyedge.service.jobs import JobState

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
        data = [{"path": served, "meta": {"_type": "gradio.FileData"}}, "", "Hello.", None, 1.0, "auto", True, None]
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


# --- the page's words come from codes, never from the English text ------------------------------

#: The refusals the page translated when it read the service's English with regexes.
TRANSLATED_BEFORE = {"text_too_long", "instruction_too_long", "text_only_punctuation",
                     "text_no_supported_script", "text_markup", "prompt_silent", "prompt_rate_too_low",
                     "prompt_too_long", "prompt_invalid_samples", "prompt_empty_file", "voice_id_taken",
                     "voice_name_taken", "voice_name_empty", "queue_full", "too_hot", "shutting_down",
                     "consent_required"}


def test_every_code_the_page_words_is_in_the_error_and_note_trees():
    from cosyedge.errors import error_codes
    from cosyedge.notes import NOTE_CODES
    from cosyedge.web.page_words import PAGE_NOTES, REASONS_ZH

    assert set(REASONS_ZH) - set(error_codes()) == set()
    assert set(PAGE_NOTES) - set(NOTE_CODES) == set()
    assert TRANSLATED_BEFORE <= set(REASONS_ZH)  # every refusal translated before still is


def tone(seconds: float, rate: int):
    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    return (0.2 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def wav(seconds: float, rate: int) -> bytes:
    from cosyedge.audio import wav_bytes

    return wav_bytes(tone(seconds, rate), rate)


def real_refusals(service, tmp_path):
    """Each refusal the page translates, raised by the code that raises it, with the page's Chinese."""
    import threading

    import numpy as np

    from cosyedge.service import synthesis
    from cosyedge.voices import library as voices
    from cosyedge.audio import condition_prompt, condition_prompt_array
    from cosyedge.engines.kokoro.frontend import KokoroFrontend
    from cosyedge.service.jobs import JobQueue
    from cosyedge.host.thermal import ThermalSnapshot

    def kokoro(text):
        frontend = KokoroFrontend()
        try:
            frontend.sentences(text)
        finally:
            frontend.close()

    def rename_onto_a_voice():
        (tmp_path / "new").mkdir()
        (tmp_path / "held").mkdir()
        (tmp_path / "held" / "meta.json").write_text("{}")
        voices._rename_to_new(tmp_path / "new", tmp_path / "held", "ms-lee")

    def save_twice():
        library = voices.VoiceLibrary(tmp_path / "library")
        prompt = condition_prompt_array(tone(4.0, 16000), 16000)
        for _ in range(2):
            library.save("王老师", prompt, None, engine="fake", model_id="fake-sine")

    def full_queue():
        started, release = threading.Event(), threading.Event()
        queue = JobQueue(1, 0)
        try:
            queue.submit(lambda job: (started.set(), release.wait(10)))
            assert started.wait(10)  # running, so the queue is full: 1 running, 0 waiting
            queue.submit(lambda job: None)
        finally:
            release.set()
            queue.shutdown()

    def hot_queue():
        hot = SimpleNamespace(snapshot=lambda: ThermalSnapshot(state="critical", refuse_new=True,
                                                               message="too hot (93 °C)"))
        queue = JobQueue(1, 1, thermal=hot)
        try:
            queue.submit(lambda job: None)
        finally:
            queue.shutdown()

    def closed_queue():
        queue = JobQueue(1, 1)
        queue.shutdown()
        queue.submit(lambda job: None)

    long_file, low_file = wav(121.0, 16000), wav(4.0, 8000)
    nan = tone(4.0, 16000)
    nan[100] = np.nan
    return [
        ("text_too_long", lambda: service.prepare(TTSRequest(text="x" * 5001)), "文本有 5001 个字符，上限为 5000 个"),
        ("text_too_long", lambda: synthesis.check_text("x" * 11, 10), "文本有 11 个字符，上限为 10 个"),
        ("instruction_too_long", lambda: service.prepare(TTSRequest(text="hi", instruct="x" * 501)),
         "指令有 501 个字符，上限为 500 个"),
        ("text_markup", lambda: service.prepare(TTSRequest(text="<speak>hi</speak>")), "不支持 SSML 标签，请输入纯文本"),
        ("consent_required", lambda: service.prepare(TTSRequest(text="hi", prompt_audio=wav(4.0, 16000))),
         "需要确认参考音频的说话人同意克隆其声音（请勾选同意框）"),
        ("text_only_punctuation", lambda: kokoro("。！？"), "文本只有标点符号，没有可朗读的内容"),
        ("text_no_supported_script", lambda: kokoro("😀😀"),
         "文本中没有可朗读的中文、英文或日文（只有表情、符号或不支持的文字）"),
        ("prompt_silent", lambda: condition_prompt_array(np.zeros(48000, np.float32), 16000),
         "未检测到语音：参考音频是静音（或几乎静音）"),
        ("prompt_rate_too_low", lambda: condition_prompt_array(tone(4.0, 8000), 8000),
         "采样率 8000 Hz 太低，参考音频至少需要 16000 Hz"),
        ("prompt_rate_too_low", lambda: condition_prompt(low_file, max_bytes=10 ** 8),
         "采样率 8000 Hz 太低，参考音频至少需要 16000 Hz"),
        ("prompt_too_long", lambda: condition_prompt_array(tone(121.0, 16000), 16000), "参考音频长 121 秒，最长 120 秒"),
        ("prompt_too_long", lambda: condition_prompt(long_file, max_bytes=10 ** 8), "参考音频长 121 秒，最长 120 秒"),
        ("prompt_invalid_samples", lambda: condition_prompt_array(nan, 16000),
         "参考音频含有无效采样值，请重新导出为普通 PCM 音频"),
        ("prompt_empty_file", lambda: condition_prompt(b"", max_bytes=10), "参考音频文件是空的"),
        ("voice_id_taken", rename_onto_a_voice, "已有同名音色，请换一个名字"),
        ("voice_name_taken", save_twice, "已有同名音色，请换一个名字"),
        ("voice_name_empty", lambda: voices.name_to_id("  "), "音色名称为空"),
        ("queue_full", full_queue, "正忙：1 个任务在运行，0 个在排队"),
        ("too_hot", hot_queue, "设备温度过高，暂不接受新任务，请降温后再试"),
        ("shutting_down", closed_queue, "服务正在关闭"),
    ]


def test_each_translated_refusal_is_raised_with_its_code_and_params(make_service, tmp_path):
    """The real raise sites give the codes and params the page's Chinese needs: a raise site whose
    English is reworded keeps its Chinese, since the page never reads the English."""
    from cosyedge.errors import CosyedgeError
    from cosyedge.web.ui import _ui_error

    service = make_service()
    assert service.submit(TTSRequest(text="Hi.")).wait(10)  # presets known: the service checks them too
    refusals = real_refusals(service, tmp_path)
    assert {code for code, _, _ in refusals} == TRANSLATED_BEFORE
    for code, refuse, chinese in refusals:
        with pytest.raises(CosyedgeError) as info:
            refuse()
        assert info.value.code == code, (code, info.value.message)
        assert f"{info.value.message} / {chinese}" in html.unescape(_ui_error(info.value).message), code


@pytest.mark.parametrize("code, params, chinese", [
    ("text_too_long", {"length": 5001, "limit": 5000}, "文本有 5001 个字符，上限为 5000 个"),
    ("prompt_too_long", {"seconds": 130.4, "maximum": 120.0}, "参考音频长 130 秒，最长 120 秒"),
    ("queue_full", {"running": 2, "waiting": 8}, "正忙：2 个任务在运行，8 个在排队"),
    ("voice_name_taken", {"name": "Ms Lee", "voice_id": "ms-lee"}, "已有同名音色，请换一个名字"),
    ("voice_name_preset", {"name": "Male 1", "preset": "male_1"}, "“male_1”是预置音色的名字，请换一个名字"),
])
def test_a_reworded_message_keeps_its_chinese(code, params, chinese):
    from cosyedge.errors import error_codes
    from cosyedge.web.ui import _ui_error

    reworded = error_codes()[code]("Worded quite differently now (see the docs)", code=code, **params)
    shown = html.unescape(_ui_error(reworded).message)
    assert "Worded quite differently now (see the docs) / " + chinese in shown


def test_a_full_queue_on_a_hot_box_names_the_heat_on_the_page():
    from cosyedge.errors import BusyError
    from cosyedge.host.thermal import ThermalSnapshot
    from cosyedge.service.jobs import JobQueue
    from cosyedge.web.ui import _ui_error

    hot = SimpleNamespace(snapshot=lambda: ThermalSnapshot(state="hot", temp_c=84.0, hold_new=True,
                                                           message="cooling down (84 °C)", resume_in_s=90.0))
    queue = JobQueue(1, 0, thermal=hot)
    try:
        with pytest.raises(BusyError) as refused:
            queue.submit(lambda job: None)
    finally:
        queue.shutdown()
    shown = html.unescape(_ui_error(refused.value).message)
    assert "the box is cooling down (84 °C)" in shown
    assert "设备正在降温（84 °C）：降温前不会开始新任务，已有 0 个任务在等待" in shown
    assert "约 90 秒后重试" in shown


def test_an_error_without_chinese_is_shown_in_english_alone():
    from cosyedge.errors import NotFoundError, TextError
    from cosyedge.web.ui import CANNOT_GENERATE, _ui_error

    assert _ui_error(NotFoundError("no saved voice 'x'")).message == f"{CANNOT_GENERATE}: no saved voice 'x'"
    # a code whose Chinese needs params the error lacks: English alone, not a broken page
    assert _ui_error(TextError("too long", code="text_too_long")).message == f"{CANNOT_GENERATE}: too long"


def test_ignored_fields_are_named_in_the_page_words(make_service, tmp_path):
    """The service's notes name REST fields; the page says them in the words of its own controls."""
    from pathlib import Path

    service = make_service()
    prompt = Path(wav_path(tmp_path, 4.0)).read_bytes()
    saved = service.save_voice("Ms Lee", prompt, "hello", consent=True)

    def ignored(tts: TTSRequest) -> str:
        _, panel, _ = asyncio.run(run_request(service, tts, SimpleNamespace(session_hash="n"), Progress()))
        return html.unescape(next(line for line in panel.split("\n\n") if "Ignored / 已忽略" in line))

    assert ignored(TTSRequest(text="Hi.", voice_id=saved.id, consent=True, prompt_audio=prompt,
                              speaker="male_1", prompt_text="hello")).endswith(
        "the prompt audio ignored: the saved voice 'ms-lee' was used instead / 已忽略参考音频：使用了已保存的"
        "音色“ms-lee”; the voice 'male_1' ignored: the voice comes from the saved voice 'ms-lee' / 已忽略音色"
        "“male_1”：音色来自已保存的音色“ms-lee”; the prompt transcript ignored: the saved voice keeps its own "
        "transcript / 已忽略参考音频文本：已保存的音色使用自己的文本")
    assert ignored(TTSRequest(text="Hi.", consent=True, prompt_audio=prompt, speaker="male_1",
                              prompt_text="hello")).endswith(
        "the voice 'male_1' ignored: the voice comes from the prompt audio / 已忽略音色“male_1”：音色来自参考"
        "音频; the prompt transcript ignored: the fake engine cannot clone; it chooses the closest built-in "
        "voice from the sound of the prompt audio alone / 已忽略参考音频文本：fake 引擎不能克隆，只凭参考音频的"
        "声音选择音色")


def test_the_language_dropdowns_offer_the_loaded_engines_languages(make_service, fake_factory):
    """A Fun-CosyVoice3 model reads ko/de/es/fr/it/ru too: once it has loaded, the three tabs
    offer them; a choice the next model does not read falls back to auto."""
    from cosyedge.engines.base import MORE_LANGUAGES

    fake_factory.engine_kwargs["languages"] = ("auto", "zh", "en", "ja", *MORE_LANGUAGES)
    service = make_service()
    demo = build_ui(service)
    events = [f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == "languages"]
    assert events, "no event refreshes the language dropdowns"
    for event in events:
        assert [getattr(o, "elem_id", None) for o in event.outputs] == [
            "clone-language", "instruct-language", "preset-language"]
    languages = events[0]

    def offered(update) -> list[str]:
        return [value for _, value in update["choices"]]

    before = languages.fn("auto", "zh", "en")
    assert [offered(u) for u in before] == [["auto", "zh", "en", "ja"]] * 3  # nothing loaded yet
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    after = languages.fn("ko", "zh", "auto")
    assert all(offered(u) == ["auto", "zh", "en", "ja", *MORE_LANGUAGES] for u in after)
    assert [u["value"] for u in after] == ["ko", "zh", "auto"]
    fake_factory.engine_kwargs["languages"] = ("zh", "en", "ja")  # as Kokoro: no "auto" of its own
    service.holder.unload()
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    kokoro = languages.fn("ko", "ja", "auto")
    assert all(offered(u) == ["auto", "zh", "en", "ja"] for u in kokoro)
    assert [u["value"] for u in kokoro] == ["auto", "ja", "auto"]


def test_the_quality_control_shows_only_while_the_served_engine_has_modes(make_service, fake_factory):
    """One quality control per generate tab: hidden on an engine without modes (Kokoro), showing the
    modes with the server's default once a CosyVoice-like engine has loaded; the request carries the
    choice only where it means something."""
    from cosyedge.service.requests import QUALITY_NAMES
    from cosyedge.web.ui import quality_field

    service = make_service()
    demo = build_ui(service)
    events = [f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == "qualities"]
    assert events, "no event refreshes the quality controls"
    assert [getattr(o, "elem_id", None) for o in events[0].outputs] == [
        "clone-quality", "instruct-quality", "preset-quality"]
    qualities = events[0]
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    hidden = qualities.fn(None, None, None)
    assert all(u["visible"] is False and u["choices"] == [] for u in hidden)
    assert quality_field(service, "live") is None  # a hidden control's value never reaches the request

    fake_factory.engine_kwargs["quality_modes"] = QUALITY_NAMES
    service.holder.unload()
    assert service.submit(TTSRequest(text="Hi.")).wait(10)
    shown = qualities.fn("live", None, "nonsense")
    assert all(u["visible"] is True and [m for _, m in u["choices"]] == list(QUALITY_NAMES) for u in shown)
    assert [u["value"] for u in shown] == ["live", "exact", "exact"]  # exact: the server's default
    assert quality_field(service, "live") == "live"
