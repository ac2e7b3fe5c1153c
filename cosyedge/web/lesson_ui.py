"""The page's long-lesson controls, one set per generate tab, and the wait for a lesson's job.

Each tab gets a folded "long lesson from a file" box (:func:`lesson_controls`): the file (.txt or
.md, UTF-8, with its limit stated), "one WAV per paragraph (zip)", and a button; the tab's own voice
fields make the request (:mod:`cosyedge.web.ui` builds it), the service reads the lesson
(``Service.read_lesson`` / ``submit_lesson``, :mod:`cosyedge.service.lessons`), and :func:`follow_lesson`
reports the paragraph being made with the time left until the WAV lands in the tab's player.
"""

# No `from __future__ import annotations`: the page's handlers read real annotations (see ui.py).
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cosyedge.service.jobs import Job
from cosyedge.service.lessons import LESSON_SUFFIXES, LessonResult
from cosyedge.notes import code_of
from cosyedge.service.facade import Service
from cosyedge.web.job_wait import wait_reporting

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

CANNOT_READ_LESSON = "Cannot read the lesson / 无法朗读课文"
NO_LESSON_FILE = "Choose a .txt or .md lesson file first / 请先选择 .txt 或 .md 课文文件"
LESSON_GONE = ("The lesson file is no longer on the server: choose it again / "
               "课文文件已不在服务器上，请重新选择")


@dataclass
class LessonControls:
    """One tab's lesson box."""

    file: "gr.File"
    per_paragraph: "gr.Checkbox"
    go: "gr.Button"
    archive: "gr.File"  # the paragraphs' zip, when asked for


def limit_words(max_chars: int) -> str:
    """The box's stated limit, in both languages."""
    return (f"A .txt or .md file in UTF-8, up to {max_chars:,} characters (the text box takes 5,000); "
            "read paragraph by paragraph (blank lines separate paragraphs) in this tab's voice and "
            "settings; the WAV lands in the player below / UTF-8 编码的 .txt 或 .md 文件，最多 "
            f"{max_chars:,} 个字符；按段落（空行分段）用本页的音色和设置朗读，WAV 出现在下方播放器中")


def lesson_controls(prefix: str, max_chars: int) -> LessonControls:
    """The lesson box of the tab ``prefix`` (elem ids ``<prefix>-lesson-*``)."""
    import gradio as gr

    with gr.Accordion("Long lesson from a file / 从文件朗读长课文", open=False,
                      elem_id=f"{prefix}-lesson"):
        gr.Markdown(limit_words(max_chars), elem_id=f"{prefix}-lesson-limit")
        file = gr.File(file_types=list(LESSON_SUFFIXES), type="filepath",
                       label="Lesson file (.txt / .md) / 课文文件", elem_id=f"{prefix}-lesson-file")
        with gr.Row():
            per_paragraph = gr.Checkbox(False, label="Also one WAV per paragraph (zip) / 另附每段一个 WAV（zip）",
                                        elem_id=f"{prefix}-lesson-zip-wanted")
            go = gr.Button("Read the lesson / 朗读课文", elem_id=f"{prefix}-lesson-generate")
        archive = gr.File(label="Paragraphs (zip) / 分段音频（zip）", interactive=False,
                          elem_id=f"{prefix}-lesson-zip")
    return LessonControls(file, per_paragraph, go, archive)


def _clock(seconds: float) -> tuple[str, str]:
    seconds = max(0, round(seconds))
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s", f"{seconds // 60} 分 {seconds % 60:02d} 秒"
    return f"{seconds} s", f"{seconds} 秒"


def progress_words(phase: str) -> str | None:
    """The page's words for a lesson's progress note (by its code and params); None for others."""
    if code_of(phase) != "lesson_progress":
        return None
    params = phase.params  # type: ignore[attr-defined]
    where = f"paragraph {params['paragraph']}/{params['total']}"
    where_zh = f"第 {params['paragraph']}/{params['total']} 段"
    if params.get("seconds_left") is None:
        return f"{where}, estimating the time left / {where_zh}，正在估算剩余时间"
    left, left_zh = _clock(params["seconds_left"])
    return f"{where}, about {left} left / {where_zh}，约剩 {left_zh}"


async def follow_lesson(service: Service, job: Job, progress: Any,
                        labels: dict[str, str]) -> LessonResult:
    """Wait for a lesson's job, reporting its queue place or its paragraph and time left; its
    result, or its error raised again. The job is cancelled when the wait is (the page went away)."""
    def report(job: Job) -> None:
        position = service.position(job)
        words = progress_words(job.phase)
        if position is not None:
            progress(0.0, desc=f"waiting: position {position} / 排队中：第 {position} 位")
        elif words is not None and job.total_steps:
            progress((job.done_steps, job.total_steps), desc=words)
        elif code_of(job.phase) == "lesson_zipping":
            progress(1.0, desc="cutting one file per paragraph / 正在生成分段文件")
        else:
            progress(0.0, desc=labels.get(job.phase, job.phase))

    return await wait_reporting(service, job, report)


def download_name(lesson_path: str | Path, suffix: str) -> str:
    """A file name a person can read for a lesson's download: the lesson file's own name (letters,
    digits, CJK, '-', '_' kept; the rest '-') + ``suffix``, e.g. "rivers-paragraphs.zip"."""
    stem = re.sub(r"[^\w-]+", "-", Path(lesson_path).stem, flags=re.UNICODE).strip("-_")[:60]
    return f"{stem or 'lesson'}{suffix}"


def named_download(path: Path, name: str, cache_dir: str | Path) -> str:
    """``path`` (outputs/<job>.zip: job ids name what the box writes) offered under ``name``: a hard
    link (a copy across file systems) in a folder of its own in the page's upload cache, so Gradio
    serves it by that name without copying it again, and the janitor's upload sweep bounds it."""
    folder = Path(tempfile.mkdtemp(prefix="lesson-", dir=cache_dir))
    target = folder / name
    try:
        os.link(path, target)
    except OSError:
        shutil.copyfile(path, target)
    return str(target)


def lesson_line(result: LessonResult) -> str:
    """The report panel's line for what a lesson adds to a generate's report."""
    extra = " and one WAV per paragraph in the zip / 另有每段 WAV（zip）" if result.zip_path else ""
    return (f"\n\n- **Lesson / 课文**: {result.paragraphs} paragraph(s) / 段, one WAV / 一个 WAV{extra}; "
            "similarity to the prompt not measured for a lesson / 课文不测量与参考音频的相似度")
