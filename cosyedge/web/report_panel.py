"""The "what the engine did" panel of a generate tab, as Markdown: engine, voice and what it is
(a preset, a native clone, the closest built-in voice with its notes), the measured similarity, the instruction applied and not, text not read aloud, a clone's
mode and prompt transcript, the fields ignored (in the page's words, :mod:`cosyedge.web.page_words`),
the audio's length. Everything that can carry user text goes through :func:`plain`."""

from __future__ import annotations

from typing import Any

from cosyedge.notes import code_of
from cosyedge.service.captions import Captions
from cosyedge.service.pronunciations import READING_NOTES
from cosyedge.service.requests import TTSResult
from cosyedge.web.page_words import bilingual_note, page_note

#: What the similarity numbers mean, from the checks measured when the encoder was adopted
#: (cosyedge/listening/speaker.py): a hint on the scale, not a quality claim.
SIMILARITY_SCALE = ("cosine of voice embeddings, 1.00 = same; measured: the same voice on other "
                    "sentences 0.88-0.93, a male vs a female voice 0.10-0.48 / 声纹余弦相似度，"
                    "1.00 为相同；实测同一人不同句子 0.88-0.93，男女声之间 0.10-0.48")
#: Characters that Markdown or HTML read as markup wherever they stand (the panel's user text never
#: starts a line, so line-start syntax such as "#" or "-" cannot apply); "[" and "]" cover links and
#: images, "@" e-mail autolinks.
_MARKUP_CHARS = set("\\`*[]<>&~$|@")


def plain(text: object) -> str:
    """``text`` made inert for a gr.Markdown panel: no tags, links, images or emphasis from it, on
    one line. Markup characters become character references, which the page shows as themselves;
    ordinary names ("female_1", "fake-sine") stay as they are."""
    line = " ".join(str(text).splitlines())
    out = []
    for i, char in enumerate(line):
        before = line[i - 1] if i else " "
        after = line[i + 1] if i + 1 < len(line) else " "
        markup = (char in _MARKUP_CHARS
                  or (char == "_" and not (before.isalnum() and after.isalnum()))  # _emphasis_
                  or (char == ":" and line.startswith("//", i + 1))  # http://... autolinks
                  or (char == "." and line[max(0, i - 3):i].lower() == "www"))  # www.... autolinks
        out.append(f"&#{ord(char)};" if markup else char)
    return "".join(out)


def describe(result: TTSResult) -> str:
    """The "what the engine did" panel, as Markdown. Everything that can carry user text (voice
    names, the instruction) goes through :func:`plain`."""
    instruct = result.instruct
    voice = f"**Voice / 音色**: {plain(result.voice)} — {plain(bilingual_note(result.voice_match))}"
    lines = [f"**Engine / 引擎**: {plain(result.engine)} ({plain(result.model_id)})", voice]
    lines += [f"**Voice note / 音色说明**: {plain(bilingual_note(note))}" for note in result.notes
              if code_of(note) in VOICE_NOTES]
    if result.similarity is not None:
        lines.append(f"**Similarity of this audio to the prompt (measured) / 本次音频与参考音频的相似度"
                     f"（实测）**: {result.similarity:.2f} ({SIMILARITY_SCALE})")
    if instruct.get("applied") or instruct.get("not_supported"):
        applied = "; ".join(bilingual_note(note) for note in instruct.get("applied") or [])
        missing = "; ".join(bilingual_note(note) for note in instruct.get("not_supported") or [])
        lines.append(f"**Instruction / 指令**: {plain(bilingual_note(instruct.get('message', '')))}")
        lines.append(f"**Applied / 已执行**: {plain(applied) if applied else 'nothing / 无'}")
        if missing:
            lines.append(f"**Not supported / 不支持**: {plain(missing)}")
    if result.skipped:
        lines.append(f"**Not read aloud / 未朗读**: {plain('; '.join(bilingual_note(s) for s in result.skipped))}")
    lines.extend(transcript_lines(result))
    for note in result.notes:
        if code_of(note) == "stream_cache_limit":  # what the stream did, not a field ignored
            lines.append(f"**Streaming / 流式**: {plain(bilingual_note(note))}")
        elif code_of(note) in READING_NOTES:  # what the pronunciation dictionary did
            lines.append(f"**Pronunciation / 读音**: {plain(bilingual_note(note))}")
        elif code_of(note) == "lesson_paragraph_failed":
            lines.append(f"**Lesson stopped / 课文中断**: {plain(bilingual_note(note))}")
    ignored = [note for note in result.notes
               if code_of(note) not in TRANSCRIPT_NOTES | VOICE_NOTES | OWN_LINE_NOTES]
    if ignored:
        notes = "; ".join(bilingual_note(note, page_note(note)) for note in ignored)
        lines.append(f"**Ignored / 已忽略**: {plain(notes)}")
    lines.append(f"**Audio / 音频**: {result.duration:.2f} s, {result.sample_rate} Hz, "
                 f"{result.sentences} sentence(s), made in {result.seconds:.1f} s / {result.sentences} 句，"
                 f"用时 {result.seconds:.1f} 秒")
    return "\n\n".join(f"- {line}" for line in lines)


#: Notes on how a prompt's closest built-in voice was chosen (cosyedge/engines/kokoro/closest_voice.py):
#: the panel shows them with the voice, not among the ignored fields.
VOICE_NOTES = frozenset({"closest_voice_outside_band", "closest_voice_no_pitch", "voice_sound_changed"})
#: Notes with a line of their own, not among the ignored fields.
OWN_LINE_NOTES = READING_NOTES | {"stream_cache_limit", "lesson_paragraph_failed"}
#: At most this many cues are listed in the panel; the files hold them all.
SHOWN_CUES = 40


def caption_lines(captions: Captions) -> str:
    """The panel's captions: each sentence with its time in the audio (the first :data:`SHOWN_CUES`),
    and whether the WebVTT file carries word timings."""
    if not captions.cues:
        return ""
    words = ("word timings in the WebVTT file / WebVTT 文件含逐词时间" if captions.has_words
             else "one cue per sentence / 每句一条")
    lines = [f"\n\n**Captions / 字幕** ({len(captions.cues)} cue(s), {words}; download below / 可在下方下载):"]
    for cue in captions.cues[:SHOWN_CUES]:
        lines.append(f"- `{_clock(cue.start)} → {_clock(cue.end)}` {plain(cue.text)}")
    if len(captions.cues) > SHOWN_CUES:
        lines.append(f"- … {len(captions.cues) - SHOWN_CUES} more in the files / 其余见字幕文件")
    return "\n".join(lines)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(max(0.0, seconds), 60)
    return f"{int(minutes):02d}:{rest:05.2f}"


#: The notes that say how a clone's prompt transcript was found (cosyedge.voices.transcripts): shown with
#: the transcript, not among the ignored fields.
TRANSCRIPT_NOTES = frozenset({"transcript_heard", "transcript_unsure", "transcript_not_heard",
                              "transcript_unavailable"})
CLONE_MODES = {"zero_shot": "zero-shot (reads the prompt's transcript) / 零样本克隆（读取参考音频文本）",
               "cross_lingual": "cross-lingual (from the prompt's sound alone) / 跨语种克隆（仅依据参考音频的声音）",
               "instruct": "with the instruction / 按指令"}
TRANSCRIPT_SOURCES = {"user": "as typed / 按输入", "asr": "heard offline / 离线识别"}


def transcript_lines(result: Any) -> list[str]:
    """The panel's lines on a native clone: the mode used, and the prompt transcript (typed or
    heard, with the recognizer's confidence) with the note that says why the mode was chosen."""
    mode = getattr(result, "clone_mode", None)  # a lesson's result says it in its notes only
    lines = [] if mode is None else [f"**Clone mode / 克隆方式**: {CLONE_MODES.get(mode, plain(mode))}"]
    heard = getattr(result, "transcript", None)
    if mode is not None and heard and heard.get("text"):
        how = TRANSCRIPT_SOURCES.get(heard.get("source"), "")
        if heard.get("confidence") is not None:
            how += f", confidence / 置信度 {heard['confidence']:.2f}"
        lines.append(f"**Prompt transcript / 参考音频文本** ({how}): {plain(heard['text'])}")
    for note in result.notes:
        if code_of(note) in TRANSCRIPT_NOTES:
            lines.append(f"**Why / 原因**: {plain(bilingual_note(note))}")
    return lines
