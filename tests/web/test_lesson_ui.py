"""The page's lesson handler without a browser: its result, its progress words and its refusals."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from cosyedge.service.lessons import progress_note
from cosyedge.service.requests import TTSRequest
from cosyedge.web.lesson_ui import limit_words, progress_words
from cosyedge.web.ui import lesson_request
from tests.web.test_ui import Progress

SESSION = SimpleNamespace(session_hash="lesson")


def test_progress_words_say_the_paragraph_and_the_time_left_in_both_languages():
    assert progress_words(progress_note(0, 7, None)) == (
        "paragraph 1/7, estimating the time left / 第 1/7 段，正在估算剩余时间")
    assert progress_words(progress_note(2, 7, 83.4)) == (
        "paragraph 3/7, about 1 min 23 s left / 第 3/7 段，约剩 1 分 23 秒")
    assert progress_words("synthesizing") is None
    assert "12,000 characters" in limit_words(12000) and "12,000 个字符" in limit_words(12000)


def test_the_handler_returns_the_wav_the_panel_and_the_zip(make_service, fake_factory, tmp_path):
    fake_factory.engine_kwargs["delay"] = 0.15  # 0.45 s a paragraph: the page polls every 0.25 s
    service = make_service()
    lesson = tmp_path / "l.txt"
    lesson.write_text("One. Two. Three.\n\nFour. Five. Six.\n\nSeven. Eight. Nine.", encoding="utf-8")
    progress = Progress()
    wav, panel, archive, captions = asyncio.run(lesson_request(service, str(lesson), True,
                                                               TTSRequest(text="", speaker="child"), SESSION,
                                                               progress))
    assert Path(wav).is_file() and Path(archive).suffix == ".zip"
    assert "3 paragraph(s)" in panel and "child" in panel
    assert "(9 cue(s)" in panel and [Path(p).suffix for p in captions] == [".vtt", ".srt"]
    assert Path(captions[0]).read_text("utf-8").count(" --> ") == 9
    descs = [desc for _, desc in progress.calls if desc]
    assert {d.split(",")[0] for d in descs if d.startswith("paragraph")} >= {"paragraph 2/3", "paragraph 3/3"}, descs


@pytest.mark.parametrize("content, words", [
    ("Grüße".encode("latin-1"), "UTF-8 编码"),
    (b"", "没有可朗读的文字"),
])
def test_a_bad_lesson_is_a_bilingual_refusal(make_service, tmp_path, content, words):
    import gradio as gr

    service = make_service()
    lesson = tmp_path / "l.txt"
    lesson.write_bytes(content)
    with pytest.raises(gr.Error) as caught:
        asyncio.run(lesson_request(service, str(lesson), False, TTSRequest(text=""), SESSION, Progress()))
    assert "Cannot read the lesson / 无法朗读课文" in caught.value.message and words in caught.value.message
    assert service.active_jobs() == []


def test_too_long_and_no_file_are_refused_too(make_service, web_settings, tmp_path):
    import gradio as gr

    service = make_service(dataclasses.replace(web_settings, max_lesson_chars=50))
    lesson = tmp_path / "l.md"
    lesson.write_text("word " * 20, encoding="utf-8")
    with pytest.raises(gr.Error) as caught:
        asyncio.run(lesson_request(service, str(lesson), False, TTSRequest(text=""), SESSION, Progress()))
    assert "上限为 50 个" in caught.value.message
    with pytest.raises(gr.Error) as caught:
        asyncio.run(lesson_request(service, None, False, TTSRequest(text=""), SESSION, Progress()))
    assert "Choose a .txt or .md lesson file" in caught.value.message


def test_a_20_mb_text_file_is_refused_with_its_size_and_the_limit(make_service, tmp_path):
    import gradio as gr

    service = make_service()
    lesson = tmp_path / "huge.txt"
    with open(lesson, "wb") as f:
        f.truncate(20 * 1024 * 1024)
    with pytest.raises(gr.Error) as caught:
        asyncio.run(lesson_request(service, str(lesson), False, TTSRequest(text=""), SESSION, Progress()))
    message = caught.value.message
    assert "the lesson file is 21.0 MB; a lesson may have at most 60000 characters" in message
    assert "课文文件有 20.97 MB" in message and service.active_jobs() == []


def test_a_lessons_zip_is_offered_under_the_lessons_name(tmp_path):
    """outputs/ keeps job-id names; the download is named after the lesson file (a hard link in
    a folder of its own in the upload cache), never after the job's hash."""
    import os

    from cosyedge.web.lesson_ui import download_name, named_download

    assert download_name("/tmp/gradio/ab12/rivers.md", "-paragraphs.zip") == "rivers-paragraphs.zip"
    assert download_name("第三课 河流.txt", ".zip") == "第三课-河流.zip"
    assert download_name("../../!!!.txt", ".zip") == "lesson.zip"
    archive = tmp_path / "outputs" / "3f2a9c0d11e24b7a.zip"
    archive.parent.mkdir()
    archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    cache = tmp_path / "gradio"
    cache.mkdir()
    offered = named_download(archive, "rivers-paragraphs.zip", cache)
    assert os.path.basename(offered) == "rivers-paragraphs.zip"
    assert os.path.dirname(os.path.dirname(offered)) == str(cache)
    assert os.path.samefile(offered, archive)  # a link: no second copy on the disk
