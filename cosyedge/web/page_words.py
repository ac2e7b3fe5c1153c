"""The page's own words for what the service says by code (no message text is read): the Chinese
of the refusals a page can meet (:data:`REASONS_ZH`, by error code, cosyedge.errors), the Chinese of
the notes its report panel shows (:data:`NOTES_ZH`, by note code, cosyedge.notes) and the page's
terms for notes that name REST fields (:data:`PAGE_NOTES`), each filled from the error's or note's
params."""

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
    # the prompt audio (cosyedge.audio)
    "wav_truncated": "WAV 文件不完整：文件头声明有 {promised} 字节音频，实际只有 {present} 字节，请上传完整的文件",
    "wav_no_data": "WAV 文件不完整或已损坏：没有音频数据",
    "prompt_missing": "没有参考音频：请先录制或上传一段",
    "prompt_no_samples": "参考音频中没有采样数据",
    "prompt_file_too_large": "参考音频文件有 {size_mb:.1f} MB，上限为 {limit_mb:.1f} MB：请上传 3-10 秒的短片段",
    "prompt_text_too_long": "参考音频文本有 {length} 个字符，上限为 {limit} 个（3-10 秒语音的文本）",
    "text_empty": "文本为空：请输入要朗读的内容",
    "preset_unknown": "没有名为“{name}”的音色",
    "language_not_supported": "{engine} 引擎不会说所选语言（{language}）",
    "mode_not_supported": "此模型不支持这种方式（{mode}）",
    "job_failed": "合成失败（{error}）：详情见服务日志",
    # saved voices (cosyedge.voices)
    "saved_voice_unknown": "没有已保存的音色“{voice_id}”",
    "saved_voice_damaged": "已保存的音色“{voice_id}”已损坏：请删除后重新保存",
    "voice_id_invalid": "“{voice_id}”不是有效的音色 id",
    "voice_name_not_text": "音色名称必须是文字",
    "voice_name_control_chars": "音色名称含有控制字符",
    "voice_name_slash": "音色名称不能包含“/”或“\\”",
    "voice_name_too_long": "音色名称有 {length} 个字符，最多 {limit} 个",
    "voice_name_not_allowed": "音色名称“{name}”不可用：请使用字母、数字、空格、“.”、“_”或“-”，以字母或数字开头（或不超过 32 个字的中文名）",
    "voice_name_no_id": "音色名称“{name}”无法生成可用的 id，请换一个名字",
    "voice_names_exhausted": "类似“{name}”的音色太多了，请换一个名字",
    "transcript_too_long": "文本有 {length} 个字符，最多 {limit} 个",
    "transcript_nul": "文本含有 NUL 字符",
    "voice_file_not_zip": "不是音色文件：需要 cosyedge 导出的 .zip",
    "voice_file_members": "不是音色文件：其中的文件不对",
    "voice_file_damaged": "音色文件已损坏",
    "voice_file_transcript_not_utf8": "音色文件中的文本不是 UTF-8 编码",
    "voice_file_meta_not_json": "音色文件中的 meta.json 不是有效的 JSON",
    "voice_file_meta_format": "音色文件的格式不对（meta.json）",
    "voice_file_meta_field": "音色文件的 meta.json 中“{field}”无效",
    "voice_file_too_large": "音色文件有 {size_mb:.1f} MB，上限为 {limit_mb:.1f} MB",
    "voice_file_member_too_large": "音色文件中的 {member} 太大（{size} 字节，上限 {limit}）",
    "voice_exists": "本机已有 id 为 {voice_id} 的音色（{name}）：可作为副本导入，或替换它",
    "voice_library_full": "音色库已满（{voices} 个音色，{used_mb} MB；上限 {max_voices} 个、{max_mb} MB）：不会自动"
                          "删除任何音色，请先删除不再需要的音色",
    # the Models tab (cosyedge.catalog)
    "model_exists": "已有名为 {model} 的模型",
    "model_switch_loading": "现在无法切换到 {model}：{current} 正在加载或释放，请稍后再试",
    "model_not_usable": "模型 {model} 无法使用",
    "model_file_corrupt": "模型文件夹 {folder} 有问题：请重新完整复制",
    "model_folder_invalid": "{folder} 不是 cosyedge 写出的模型文件夹",
    "model_missing": "模型文件缺失或损坏：请运行安装命令（见 README）",
    "voice_needs_recording": "模型 {model} 没有预置音色：请提供 3-10 秒的参考音频，或使用已保存的音色",
    # the Models tab's speed-mode check (cosyedge.service.mode_check)
    "mode_check_needs_voice": "模型 {model} 没有预置音色：请选一个已保存的音色来检查速度模式",
    "mode_check_no_modes": "{engine} 引擎没有可检查的速度模式",
    "mode_check_not_served": "模型 {model} 不是正在使用的模型（{current}）：请先切换到它",
    "mode_check_running": "{model} 的速度模式检查正在进行",
    # the pronunciation dictionary (cosyedge.lexicon): each names the entry's word
    "reading_word_empty": "词语为空：请输入要读的词",
    "reading_word_too_long": "词条“{word}”有 {length} 个字符，上限为 {limit} 个",
    "reading_word_script": "词条“{word}”：该语言的词须用其文字书写（中文用汉字，英文用拉丁字母，日文用假名和汉字）",
    "reading_language_unknown": "词条“{word}”：不支持的语言 {language}（可选 zh、en、ja）",
    "reading_empty": "词条“{word}”：读音为空",
    "reading_too_long": "词条“{word}”的读音有 {length} 个字符，上限为 {limit} 个",
    "reading_control_chars": "词条“{word}”含有不可见字符或控制字符（{character}），请删除后重新输入",
    "reading_punctuation": "词条“{word}”含有标点“{mark}”，会断开句子，请删除",
    "reading_tone_missing": "词条“{word}”缺少声调：请用数字（yin2 hang2，轻声用 5）或声调符号（yín háng）",
    "reading_tone_out_of_range": "词条“{word}”：“{syllable}”的声调超出范围（1-4，轻声为 5 或 0）",
    "reading_pinyin_unknown": "词条“{word}”：“{syllable}”不是普通话音节",
    "reading_syllable_count": "词条“{word}”：读音有 {syllables} 个音节，但词有 {characters} 个字，须一字一音节",
    "reading_ipa_unknown": "词条“{word}”：英语读音中的 IPA 符号“{symbol}”无法识别，请用 IPA 或 ARPAbet",
    "reading_arpabet_unknown": "词条“{word}”：“{phone}”不是 ARPAbet 音素（元音须带重音数字，如 AY1）",
    "reading_kana_only": "词条“{word}”：日语读音只能用假名，“{character}”不是假名",
    "reading_tsv_not_utf8": "TSV 文件不是 UTF-8 编码：请另存为 UTF-8 后重新导入",
    "reading_tsv_too_large": "TSV 文件太大（{size} 字节，上限 {limit} 字节）",
    "reading_book_full": "读音词典已有 {limit} 个词条，达到上限：请先删除一些",
    "reading_entry_unknown": "读音词典中没有 {language} 词条“{word}”",
    "captions_format_unknown": "字幕格式只能是 srt 或 vtt",
}
#: Codes whose message already carries its Chinese (the page shows the message alone).
ZH_IN_MESSAGE = frozenset({"audio_not_recognised", "audio_unreadable", "prompt_too_short"})


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
        "the prompt transcript ignored: the {engine} engine cannot clone; it chooses the closest built-in "
        "voice from the sound of the prompt audio alone",
}


def page_note(note: str) -> str:
    """A service note in the page's terms (:data:`PAGE_NOTES`), or as it is."""
    if not isinstance(note, Note):
        return note
    return _fill(PAGE_NOTES, note.code, note.params) or note


_VOICES_ZH = {"male": "男声", "female": "女声", "child": "童声", "elderly": "老年人的声音"}
_EMOTIONS_ZH = {"happy": "开心", "sad": "悲伤", "angry": "生气", "calm": "平静", "excited": "兴奋",
                "whisper": "耳语", "gentle": "温柔", "serious": "严肃", "surprised": "惊讶", "fearful": "害怕"}
_LANGUAGES_ZH = {"zh": "中文", "en": "英语", "ja": "日语", "ko": "韩语", "fr": "法语", "de": "德语",
                 "es": "西班牙语", "it": "意大利语", "ru": "俄语"}
_CONTROLS_ZH = {"speed": "语速", "pitch": "音高", "volume": "音量"}
#: A quality lever's name (cosyedge.engines.cosyvoice.common.quality ``LEVER_WORDS``).
_LEVERS_ZH = {"flow_steps": "流匹配步数", "cfg_steps": "CFG 安排", "left_chunks": "有界左侧上下文",
              "first_hop_tokens": "首跳长度"}
#: A voice's preparation steps (cosyedge.service.voice_progress.STAGE_WORDS).
_STAGES_ZH = {"hearing": "识别参考音频文本", "encoders": "加载参考音频编码器", "tokens": "语音 token",
              "mel": "参考音频梅尔谱", "speaker": "说话人特征"}
#: An unsupported style's label (cosyedge.instruct.plan ``_UNSUPPORTED``): its kind before the colon.
_STYLES_ZH = {"dialect": "方言", "accent": "口音", "style": "风格", "singing": "唱歌", "crying": "哭腔",
              "laughter": "笑声", "breathy voice": "气声（沙哑）", "echo/reverb": "回声/混响",
              "stuttering": "结巴"}


def _control_zh(kind: str, amount: float) -> str:
    if kind == "speed":
        return f"语速 ×{amount:.2f}"
    return f"音高 {amount:+.1f} 半音" if kind == "pitch" else f"音量 {amount:+.1f} dB"


def _style_zh(label: str) -> str:
    kind, _, rest = str(label).partition(": ")
    return f"{_STYLES_ZH.get(kind, kind)}：{rest}" if rest else _STYLES_ZH.get(kind, kind)


def _derived(params: Any) -> dict[str, str]:
    """The Chinese of a note's params that are names or lists (a voice kind, controls, ...)."""
    out: dict[str, str] = {}
    if isinstance(params.get("voice"), str):
        out["voice_zh"] = _VOICES_ZH.get(params["voice"], params["voice"])
    if isinstance(params.get("emotion"), str):
        out["emotion_zh"] = _EMOTIONS_ZH.get(params["emotion"], params["emotion"])
    if isinstance(params.get("language"), str):
        out["language_zh"] = _LANGUAGES_ZH.get(params["language"], params["language"])
    if isinstance(params.get("read_as"), str):
        out["read_as_zh"] = _LANGUAGES_ZH.get(params["read_as"], params["read_as"])
    if "control" in params and "amount" in params:
        out["control_zh"] = _control_zh(params["control"], params["amount"])
    controls = params.get("controls") or ()
    out["controls_zh"] = "、".join(_control_zh(kind, amount) for kind, amount in controls)
    left = params.get("left") or ()
    out["left_zh"] = ("（" + "；".join(f"{_CONTROLS_ZH.get(kind, kind)}由“{phrase}”决定" for kind, phrase in left)
                      + "）") if left else ""
    if "style" in params:
        out["style_zh"] = _style_zh(params["style"])
    if "stage" in params:  # voice_preparing
        out["stage_zh"] = _STAGES_ZH.get(params["stage"], str(params["stage"]))
        left = params.get("seconds_left")
        out["left_zh"] = "正在估算剩余时间" if left is None else f"约剩 {left} 秒"
    if "paragraph" in params:  # lesson_paragraph_failed
        out["previous"] = str(params["paragraph"] - 1)
    if "cfg_steps" in params:  # quality_levers
        steps, guided = params.get("flow_steps"), params["cfg_steps"]
        cfg = "每步都用 CFG" if guided == steps else "不用 CFG" if guided == 0 else f"前 {guided} 步用 CFG"
        left, hop = params.get("left_chunks"), params.get("first_hop_tokens")
        apart = tuple(params.get("not_applicable") or ())
        parts = {"flow_steps": f"{steps} 步流匹配", "cfg_steps": cfg,
                 "left_chunks": f"左侧上下文 {left} 块" if left else "全部左侧上下文",
                 "first_hop_tokens": f"首跳 {hop} 个 token" if hop else "官方的首跳"}
        out["levers_zh"] = "，".join(words for name, words in parts.items() if name not in apart) + "".join(
            f"；{_LEVERS_ZH.get(name, name)}不适用于此模型" for name in apart)
    if "stale" in params:  # quality_not_checked
        out["why_zh"] = ("检查针对的是较早的转换" if params["stale"]
                         else "请在“模型”标签页运行速度模式检查")
    if "recommended" in params:  # quality_checked
        delta = params.get("intelligibility_delta")
        out["heard_zh"] = f"可懂度 {delta:+.1f} 分" if delta is not None else "未评可懂度"
        out["outcome_zh"] = "在此模型上推荐" if params["recommended"] else "在此模型上不推荐"
    if "entries" in params:  # reading_applied
        out["applied_zh"] = "，".join(f"{e['word']} → {e['reading']}" + (f"（×{e['count']}）" if e.get("count", 1) > 1
                                                                        else "") for e in params["entries"][:5])
    if "lines" in params:  # reading_book_damaged
        out["count"] = str(len(params["lines"]))
        out["lines_zh"] = "、".join(str(line) for line in params["lines"][:10])
    if "instead_of" in params:
        out["instead_zh"] = "你的录音的音色" if params.get("recording") else str(params["instead_of"])
    if "styles" in params:  # instruct_native_reading: how the app reads an instruction
        parts = [_control_zh(kind, amount) for kind, amount in controls]
        parts += [_VOICES_ZH.get(params["voice"], params["voice"])] if params.get("voice") else []
        parts += [f"情绪“{_EMOTIONS_ZH.get(e, e)}”" for e in params.get("emotions") or ()]
        parts += [f"语言{_LANGUAGES_ZH.get(params['language'], params['language'])}"] if params.get("language") else []
        parts += [_style_zh(style) for style in params["styles"]]
        out["reading_zh"] = "、".join(parts)
    return out


#: The Chinese of the notes the report panel shows, by note code (cosyedge.notes), filled from the
#: note's params and their Chinese (:func:`_derived`). A note without an entry shows in English alone.
NOTES_ZH = {
    # what an instruction did (cosyedge.instruct.plan): the summary line, then its items
    "instruct_none": "未给出指令",
    "instruct_native": "已交给引擎：它能直接理解指令",
    "instruct_nothing_understood": "未执行任何内容：此引擎没有原生指令功能，也没有理解指令中的任何内容",
    "instruct_nothing_supported": "未执行任何内容：指令要求的此引擎都不支持",
    "instruct_partly_applied": "已在此引擎能做到的范围内转为明确的控制执行；其余列为不支持",
    "instruct_applied": "已转为明确的控制执行（此引擎没有原生指令功能）",
    "instruct_control": "{control_zh}（“{phrase}”）",
    "instruct_voice_preset": "音色：预置音色“{preset}”，作为{voice_zh}（“{phrase}”）",
    "instruct_voice_kept": "音色：保留你选的预置音色“{kept}”，作为{voice_zh}（“{phrase}”）",
    "instruct_voice_instead": "音色：预置音色“{preset}”，作为{voice_zh}（“{phrase}”），代替{instead_zh}",
    "instruct_voice_not": "音色：不要{voice_zh}（“{phrase}”），保留所选音色",
    "instruct_voice_approximated": "音色：以{controls_zh}近似{voice_zh}（没有这种预置音色）",
    "instruct_voice_timbre": "音色：{voice_zh}的音质（此引擎不支持）",
    "instruct_voice_missing": "音色：{voice_zh}（此引擎没有这种音色）",
    "instruct_emotion_approximated": "情绪“{emotion_zh}”（“{phrase}”）以{controls_zh}近似{left_zh}",
    "instruct_emotion_not": "情绪：不要{emotion_zh}（“{phrase}”），未做处理",
    "instruct_emotion_unheard": "情绪“{emotion_zh}”（“{phrase}”）：未执行{left_zh}",
    "instruct_emotion_gap": "{emotion_zh}的音质（此引擎不支持）",
    "instruct_language": "语言：{language_zh}（朗读语言；不翻译文本）",
    "instruct_language_unsupported": "语言：{language_zh}（此引擎不支持）",
    "instruct_style_negated": "{style_zh}：已否定（“{phrase}”），无需处理",
    "instruct_style_unsupported": "{style_zh}（此引擎不支持）",
    "instruct_conflict": "冲突：忽略“{earlier}”，以后面的“{later}”为准",
    "instruct_speed_limited": "语速限制为 ×{speed:.2f}（要求 ×{asked:.2f}；范围 {low}–{high}）",
    "instruct_pitch_limited": "音高限制为 {pitch:+.1f} 半音（要求 {asked:+.1f}）",
    "instruct_volume_limited": "音量限制为 {gain:+.1f} dB（要求 {asked:+.1f}）",
    "instruct_speed_combined_limited": "语速：你的 {yours:g} × 指令 ×{factor:.2f} = {asked:.2f}，限制为 {speed:g}"
                                       "（范围 {low:g}–{high:g}）",
    "instruct_native_passed": "已作为指令交给模型：“{instruction}”",
    "instruct_native_reading": "本应用的理解：{reading_zh}（仅作说明；模型按原话执行）",
    "instruct_not_understood": "“{instruction}”：此引擎理解不了其中的指令，未执行任何内容",
    # what the voice became (service)
    "voice_preset": "预置音色",
    "voice_native_clone": "原生克隆",
    "voice_instruct_preset": "按指令使用预置音色 {voice}（代替 {instead_of}）",
    "closest_voice_outside_band": "没有内置音色的音高在参考音频（{prompt_f0_hz:.0f} Hz）的 1.5 倍以内："
                                  "{voice}（{voice_f0_hz:.0f} Hz）的音高最接近",
    "closest_voice_no_pitch": "参考音频中测不出音高：{voice} 只凭声音的特点选出",
    "voice_sound_changed": "这个音色听起来和以前不同：以前是 {before}，现在是最接近的内置音色 {voice}",
    "instruct_as_controls": "指令按本应用的控制执行：{model_name}（{model}）没有指令模式（只有 "
                            "CosyVoice-300M-Instruct 能听懂指令）；执行了什么列在指令一栏",
    # a voice prepared step by step (cosyedge.service.voice_progress)
    "voice_preparing": "正在准备音色：第 {step}/{total} 步（{stage_zh}），{left_zh}",
    "voice_prepared": "先准备了音色：{steps} 步，用时 {seconds} 秒（编码已保存：这个音色的下次回答会更快开始）",
    # the quality modes (cosyedge.service.reports, .mode_notes)
    "quality_ignored": "已忽略音质设置：{engine} 引擎没有音质模式（它们调节 CosyVoice 的流匹配参数）",
    "quality_levers": "音质 {quality}：{levers_zh}；未在真实权重上验证",
    "quality_not_checked": "音质 {quality}：尚未在此模型上检查（{why_zh}）",
    "quality_checked": "音质 {quality}：已于 {date} 在此模型上检查：相似度 {similarity:.2f}，{heard_zh}；{outcome_zh}",
    # the pronunciation dictionary (cosyedge.lexicon)
    "reading_applied": "已使用读音词典：{applied_zh}",
    "reading_book_damaged": "读音词典有 {count} 行无法读取（第 {lines_zh} 行），已跳过",
    "reading_not_supported": "“{word}”的读音（{reading}）未使用：此引擎做不到",
    "reading_other_language": "“{word}”（{language_zh}）的读音未使用：它周围的文本按{read_as_zh}朗读",
    # a lesson that stopped at a paragraph (cosyedge.service.lessons)
    "lesson_paragraph_failed": "第 {paragraph}/{total} 段无法朗读（{reason}）；课文在第 {previous} 段后结束，"
                               "这部分的音频和字幕是完整的",
    # a native clone's prompt transcript (cosyedge.voices.transcripts)
    "transcript_heard": "离线识别出参考音频文本（置信度 {confidence:.2f}）：“{heard}”；用它做零样本克隆",
    "transcript_unsure": "离线识别参考音频文本的置信度为 {confidence:.2f}，低于零样本克隆所需的 {threshold:.2f}"
                         "（错误的文本比没有更糟）：已跨语种克隆；识别结果为“{heard}”，输入或改正文本即可零样本克隆",
    "transcript_not_heard": "没有参考音频文本，参考音频中也未识别到语音：已仅凭声音跨语种克隆；输入文本即可零样本克隆",
    "transcript_unavailable": "没有参考音频文本，也无法离线识别：已仅凭声音跨语种克隆；输入文本即可零样本克隆",
    # what conditioning did to a prompt (cosyedge.audio)
    "prompt_clipping": "检测到削波：录音失真；请离麦克风远一些或调低输入增益",
    "prompt_silence_trimmed": "已去掉两端 {seconds:.1f} 秒静音",
    "prompt_cut": "已从 {seconds:.1f} 秒中截取最好的 {kept:.1f} 秒（超过 {maximum:.0f} 秒的参考音频会被截短）",
    "prompt_low_level": "音量很低（语音 {dbfs:.0f} dBFS）：参考音频已放大，噪声也随之放大；请靠近麦克风录音",
    "prompt_channels_cancel": "这段立体声录音的两个声道混合后相互抵消（其中一个反相）：已使用较响的声道",
    # text not read aloud, and a language setting the script overrode (cosyedge.text.langid)
    "tag_not_read": "标签 {tag} 未朗读：此引擎只说中文、英语和日语；其后的文本按文字朗读（拉丁字母读作英语）",
    "emoji_not_read": "{count} 个表情符号未朗读（{shown}）",
    "symbols_not_read": "{count} 个符号未朗读（{shown}）",
    "script_not_read": "{count} 个 {script} 字符未朗读（{shown}）：此引擎只读中文、英语和日语",
    "language_not_applied": "语言 {language} 未用于 {count} 个字符：按文字读作{read_as_zh}",
    # the CosyVoice flow steps and a streamed sentence (service.reports, cosyvoice.engine)
    "flow_steps_standard": "流匹配步数：{steps}（标准，与官方相同）",
    "flow_steps_fast": "流匹配步数：{steps}（快速：少于官方，未在真实权重上验证）",
    "flow_steps_ignored": "已忽略 flow_steps：{engine} 没有流匹配解码器",
    "stream_cache_limit": "第 {sentence} 句太长，超出 {budget_mb:g} MB 的流缓存预算：其余部分整体合成后在句末发送",
    # request fields that had no effect (service.reports.ignored_inputs)
    "prompt_audio_ignored": "已忽略参考音频：使用了已保存的音色“{voice_id}”",
    "speaker_ignored_saved_voice": "已忽略音色“{speaker}”：音色来自已保存的音色“{voice_id}”",
    "speaker_ignored_prompt_audio": "已忽略音色“{speaker}”：音色来自参考音频",
    "prompt_text_ignored_saved_voice": "已忽略参考音频文本：已保存的音色使用自己的文本",
    "prompt_text_ignored_no_prompt": "已忽略参考音频文本：它是参考音频的文本，但没有参考音频",
    "prompt_text_ignored_no_clone": "已忽略参考音频文本：{engine} 引擎不能克隆，只凭参考音频的声音选择音色",
}


#: Notes whose own text already carries its Chinese ("closest built-in voice / 最接近的内置音色: ...").
NOTES_IN_BOTH = frozenset({"voice_closest_builtin"})


def chinese_note(note: str) -> str | None:
    """The page's Chinese for a note (:data:`NOTES_ZH`); None for a plain string or a code without."""
    if not isinstance(note, Note) or note.code not in NOTES_ZH:
        return None
    return _fill(NOTES_ZH, note.code, {**note.params, **_derived(note.params)})


def bilingual_note(note: str, english: str | None = None) -> str:
    """``english`` (the note itself, or the page's terms for it) and its Chinese when there is one."""
    chinese = chinese_note(note)
    english = note if english is None else english
    return f"{english} / {chinese}" if chinese else english
