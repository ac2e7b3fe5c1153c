"""The page's own words for what the service says by code (no message text is read): the Chinese
of its commonest refusals (:data:`REASONS_ZH`, by error code, cosyedge.errors) and the page's terms
for notes that name REST fields (:data:`PAGE_NOTES`, by note code, cosyedge.notes), each filled from
the error's or note's params."""

from __future__ import annotations

import logging
from typing import Any

from cosyedge.errors import CosyedgeError
from cosyedge.notes import Note

logger = logging.getLogger(__name__)


#: Chinese for the service's commonest refusals, by error code (cosyedge.errors), filled from the
#: error's params; the service's reasons are English and the page is bilingual. A code not listed
#: (also one whose message carries its own Chinese) is shown in English alone.
REASONS_ZH = {
    "text_too_long": "文本有 {length} 个字符，上限为 {limit} 个",
    "instruction_too_long": "指令有 {length} 个字符，上限为 {limit} 个",
    "text_only_punctuation": "文本只有标点符号，没有可朗读的内容",
    "text_no_supported_script": "文本中没有可朗读的中文、英文或日文（只有表情、符号或不支持的文字）",
    "text_markup": "不支持 SSML 标签，请输入纯文本",
    "prompt_silent": "未检测到语音：参考音频是静音（或几乎静音）",
    "prompt_rate_too_low": "采样率 {rate} Hz 太低，参考音频至少需要 {minimum} Hz",
    "prompt_too_long": "参考音频长 {seconds:.0f} 秒，最长 {maximum:.0f} 秒",
    "prompt_invalid_samples": "参考音频含有无效采样值，请重新导出为普通 PCM 音频",
    "prompt_empty_file": "参考音频文件是空的",
    "voice_id_taken": "已有同名音色，请换一个名字",
    "voice_name_taken": "已有同名音色，请换一个名字",
    "voice_name_empty": "音色名称为空",
    "voice_name_preset": "“{preset}”是预置音色的名字，请换一个名字",
    "queue_full": "正忙：{running} 个任务在运行，{waiting} 个在排队",
    "too_hot": "设备温度过高，暂不接受新任务，请降温后再试",
    "cooling_down": "设备正在降温（{temp_c:.0f} °C）：降温前不会开始新任务，已有 {waiting} 个任务在等待",
    "shutting_down": "服务正在关闭",
    "lesson_file_type": "课文必须是 .txt 或 .md 文件",
    "lesson_not_utf8": "课文文件不是 UTF-8 编码：请在编辑器中另存为 UTF-8 后重新上传",
    "lesson_not_text": "课文文件不是纯文本文件",
    "lesson_empty": "课文文件里没有可朗读的文字",
    "lesson_too_long": "课文有 {length} 个字符，上限为 {limit} 个：请拆分成几个文件",
    "lesson_file_too_large": "课文文件有 {size_mb} MB，课文最多 {limit_chars} 个字符（{limit_mb} MB）：请拆分",
    "lesson_paragraph_invalid": "课文第 {paragraph} 段无法朗读",
    "disk_low": "磁盘快满了（剩余 {free_mb} MB，至少保留 {min_free_mb} MB）：暂不接受新任务和上传，请删除旧的输出后再试",
    "disk_full": "磁盘已满，未保存任何内容：请删除旧的输出后再试",
    "consent_required": "需要确认参考音频的说话人同意克隆其声音（请勾选同意框）",
    "model_switch_busy": "有 {running} 个任务在运行、{waiting} 个在排队，完成后才能切换模型（没有任务被取消）",
    "model_unknown": "没有名为 {model} 的模型",
}


def chinese_reason(exc: CosyedgeError) -> str | None:
    """The page's Chinese for an error, from its code and params; None for a code not in
    :data:`REASONS_ZH`."""
    return _fill(REASONS_ZH, exc.code, exc.params)


def _fill(templates: dict[str, str], code: str, params: Any) -> str | None:
    """``templates[code]`` filled from ``params``; None when the code has no template, or when the
    error or note was made without the params its template names (logged)."""
    template = templates.get(code)
    if template is None:
        return None
    try:
        return template.format(**params)
    except (KeyError, IndexError, ValueError):
        logger.warning("%s lacks the params of the page's words for it (%s)", code, dict(params))
        return None


#: Notes that name REST fields, by note code (cosyedge.notes), in the page's words for its own
#: controls, filled from the note's params; other notes are shown as the service wrote them.
PAGE_NOTES = {
    "prompt_audio_ignored": "the prompt audio ignored: the saved voice {voice_id!r} was used instead",
    "speaker_ignored_saved_voice":
        "the voice {speaker!r} ignored: the voice comes from the saved voice {voice_id!r}",
    "speaker_ignored_prompt_audio": "the voice {speaker!r} ignored: the voice comes from the prompt audio",
    "prompt_text_ignored_saved_voice":
        "the prompt transcript ignored: the saved voice keeps its own transcript",
    "prompt_text_ignored_no_prompt":
        "the prompt transcript ignored: it is the transcript of the prompt audio, and no prompt audio was sent",
    "prompt_text_ignored_no_clone":
        "the prompt transcript ignored: the {engine} engine cannot clone; it matches the voice from the "
        "sound of the prompt audio alone, without its transcript",
}


def page_note(note: str) -> str:
    """A service note in the page's terms (:data:`PAGE_NOTES`), or as it is."""
    if not isinstance(note, Note):
        return note
    return _fill(PAGE_NOTES, note.code, note.params) or note
