"""Natural-language instruction -> an explicit, visible plan of controls.

``plan("read it a bit slower, 开心一点", capabilities)`` returns an :class:`InstructPlan` holding the
controls the app will really apply (speed factor, pitch shift, gain, voice preset, emotions, language)
plus two lists written for people: what was applied and what was not, each line a
:class:`~cosyedge.notes.Note` (its English text with a code and the parts it was built from, so
lines are built from parts, never edited as text). Engines with native instruct (CosyVoice) also get
``native_instruction``, the text formatted for the model by the engine itself
(``engine.format_instruction``: the prompt format is the model's); for them the controls are an
explanation only and nothing is applied on top (see :func:`apply_plan`).

How an instruction is read (the rules the tests pin down):

1. The text is NFKC-normalised and lower-cased, then scanned for cue words in Chinese and English
   (speed, volume, pitch, voice, emotion, language, unsupported styles). Where cues overlap the longest
   wins ("快乐" is happy, not "快" fast; "低沉" is pitch, "低声" is volume).
2. Negation ("不要太快", "not too loud", "don't rush") flips a speed/volume/pitch cue into a *slight*
   move the other way; a negated voice or emotion is simply not applied. A complaint ("太快了",
   "too loud", "声音太小了") is read the same way. "特别" is "very", not "别" (don't).
3. Intensity words scale a cue: slight ("a bit", "稍微", "有点", "…一点") ×0.5, strong ("very",
   "非常", "很", "特别") ×1.5, extreme ("extremely", "极其", "超级", "very very", "非常非常") ×2.
   Speed factors scale as powers (slow = ×0.8, "a bit slower" = ×0.8^0.5 ≈ ×0.89); semitones and
   decibels scale linearly. A speed factor can also be named: "1.5x", "1.2倍速", "twice as fast" /
   "两倍速" (×2), "half speed" / "半速" (×0.5).
4. Conflicts: per control, **the last cue in the text wins** ("slow and fast" -> fast); the overridden
   cue is listed under not_supported as a conflict. Two negated opposite cues ("不要太快也不要太慢",
   "neither too loud nor too soft") cancel to neutral. Emotions of opposite kinds (happy/sad,
   angry/calm, excited/calm) follow the same rule. An explicit speed/volume/pitch word overrides the
   part of an emotion that touches the same control ("happy but slowly": pitch from happy, speed from
   slowly). An emotion whose every part an explicit word has set is not applied at all and is
   listed under not_supported ("whisper loudly": "emotion 'whisper' …: nothing applied …").
5. A voice word naming the listeners ("给小朋友讲故事", "read it for kids") does not pick a voice.
6. Dialects, accents, singing, and styles the engine cannot do are listed as "not supported by this
   engine"; an instruction with no recognised cue at all says so too. Nothing here ever raises for an
   odd instruction: only a non-string or an over-long one is a ParameterError.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from cosyedge.engines.base import Capabilities, Engine, SynthesisOptions, VoicePrompt
from cosyedge.errors import ParameterError
from cosyedge.notes import Note, code_of

logger = logging.getLogger(__name__)

#: The instruction limit before an engine is loaded (the service's check); a loaded engine's is its
#: ``capabilities.max_instruct_chars``.
MAX_INSTRUCTION_CHARS = Capabilities(native_clone=False, native_instruct=False, languages=(),
                                     sample_rate=0).max_instruct_chars

#: Base effect of one plain cue (intensity 1.0).
SPEED_SLOW = 0.8
SPEED_FAST = 1.25
PITCH_STEP_ST = 3.0
GAIN_STEP_DB = 6.0

#: Limits of the post-processing controls (quality degrades beyond these).
PITCH_RANGE_ST = (-6.0, 6.0)
GAIN_RANGE_DB = (-18.0, 9.0)

SLIGHT, NORMAL, STRONG, EXTREME = 0.5, 1.0, 1.5, 2.0


#: The summary of a request without an instruction (also the service's, when it makes no plan).
NO_INSTRUCTION = Note("no instruction given", code="instruct_none")


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class InstructPlan:
    """The explicit controls read from one instruction, and what was (not) applied.

    ``speed`` is a factor on the user's speed, ``pitch_semitones`` and ``gain_db`` are post-processing
    amounts, ``voice`` a preset name (or None = keep the user's voice). ``native`` is True when the
    engine follows the instruction itself; then ``native_instruction`` is what it receives and the
    controls are an explanation, not applied.
    """

    instruction: str = ""
    speed: float = 1.0
    pitch_semitones: float = 0.0
    gain_db: float = 0.0
    voice: str | None = None
    emotions: tuple[str, ...] = ()
    language: str | None = None
    applied: tuple[Note, ...] = ()
    not_supported: tuple[Note, ...] = ()
    native: bool = False
    native_instruction: str | None = None
    understood: bool = True  # False: no word of the instruction was recognised

    @property
    def controls(self) -> dict:
        """The numeric/named controls as a JSON-able dict."""
        return {"speed": self.speed, "pitch_semitones": self.pitch_semitones, "gain_db": self.gain_db,
                "voice": self.voice, "emotions": list(self.emotions), "language": self.language,
                "native": self.native, "native_instruction": self.native_instruction}

    @property
    def message(self) -> Note:
        """One summary line for the UI panel."""
        if self.native:
            return Note("passed to the engine, which follows instructions natively", code="instruct_native")
        if not self.instruction:
            return NO_INSTRUCTION
        if not self.applied and not self.understood:
            return Note("nothing applied: this engine has no native instruct and understood none of it",
                        code="instruct_nothing_understood")
        if not self.applied:
            return Note("nothing applied: what it asks for is not supported by this engine",
                        code="instruct_nothing_supported")
        if self.not_supported:
            return Note("applied as explicit controls where this engine can; the rest is listed as not "
                        "supported", code="instruct_partly_applied")
        return Note("applied as explicit controls (this engine has no native instruct)",
                    code="instruct_applied")

    def to_dict(self) -> dict:
        """The shape returned by REST and shown in the UI panel."""
        return {"applied": list(self.applied), "not_supported": list(self.not_supported),
                "controls": self.controls, "message": self.message}

    @property
    def is_neutral(self) -> bool:
        """True when applying the plan changes nothing."""
        return (self.speed == 1.0 and self.pitch_semitones == 0.0 and self.gain_db == 0.0
                and self.voice is None and self.language is None)


# --------------------------------------------------------------------------- lexicon


@dataclass(frozen=True)
class _Cue:
    """One family of words that means one thing: a direction (+1/-1) or a name."""

    kind: str  # speed | volume | pitch | voice | emotion | language | unsupported | speed_value
    value: object
    regex: re.Pattern[str]


def _en(*words: str) -> str:
    # ASCII-letter boundaries, not \b: CJK characters count as word characters for \b, which would
    # hide "calm" in "用calm的语气".
    return r"(?<![a-z])(?:" + "|".join(words) + r")(?![a-z])"


def _zh(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


def _zh_after(nouns: Sequence[str], words: Sequence[str]) -> str:
    """``words`` (with a verb: "调大", "再小") right after a noun, or after a noun and a modifier
    ("声音稍微大", "声音太小"): the noun and the modifier stay outside the match, so the modifier
    still sets intensity or negation."""
    modifiers = ("", "稍微", "稍", "太", "不要太", "别太", "有点", "有点太", "不要", "别")
    behind = "|".join(f"(?<={noun}{mod})" for noun in nouns for mod in modifiers)
    return f"(?:{behind})(?:调得|再调|调|放|开|再|更)?(?:{'|'.join(words)})"


_LEXICON: list[tuple[str, object, str]] = [
    # speed
    ("speed", -1, _en("slow", "slowly", "slower", "slow down", "unhurried", "leisurely",
                      "take your time", "drawl", "drawn out")),
    ("speed", +1, _en("fast", "faster", "quick", "quickly", "quicker", "rapid", "rapidly", "hurry",
                      "hurried", "rush", "rushed", "brisk", "briskly", "speed up", "pick up the pace")),
    ("speed", -1, _zh("慢", "缓慢", "慢慢", "放慢", "慢速", "徐徐", "缓缓", "降低语速", "减慢")),
    ("speed", +1, _zh("快", "快速", "加快", "迅速", "急促", "语速提高", "提高语速", "赶紧", "快快")),
    ("speed", -0.5, _zh("不紧不慢", "从容")),
    ("speed", 0, _zh("不快不慢", "正常语速", "语速正常") + "|" + _en("normal speed", "normal pace")),
    # volume
    ("volume", +1, _en("loud", "loudly", "louder", "shout", "shouting", "yell", "yelling", "booming",
                       "volume up", "project your voice")),
    ("volume", -1, _en("quiet", "quietly", "quieter", "soft", "softly", "softer", "hushed",
                       "volume down", "mumble", "mumbling")),
    ("volume", +1, _zh("大声", "响亮", "洪亮", "大点声", "声音大(?!小)", "音量大(?!小)", "提高音量", "调高音量",
                       "放大音量", "喊", "高声") + "|" + _zh_after(("声音", "音量"), ("大(?!小)",))
     + "|" + _zh_after(("音量",), ("高",))),
    ("volume", -1, _zh("小声", "轻声", "低声", "声音小", "音量小", "降低音量", "调低音量", "轻轻",
                       "柔声") + "|" + _zh_after(("声音", "音量"), ("小",))
     + "|" + _zh_after(("音量",), ("低",))),
    # pitch
    ("pitch", -1, _en(r"(?:low|lower|deep|deeper)(?:-| )(?:voice|pitch|pitched|tone|register)",
                      r"lower (?:the |your )?pitch", r"pitch (?:it )?(?:down|lower)", "bass",
                      "baritone")),
    ("pitch", +1, _en(r"(?:high|higher)(?:-| )(?:voice|pitch|pitched|tone|register)",
                      r"raise (?:the |your )?pitch", r"pitch (?:it )?(?:up|higher)", "squeaky",
                      "shrill", "falsetto")),
    ("pitch", -1, _zh("低沉", "低音", "浑厚", "深沉", "音调低", "声调低", "音调降低", "降低音调",
                      "声音低", "低一点的声音", "低一些的声音", "粗一点")),
    ("pitch", +1, _zh("高亢", "高音", "尖细", "尖声", "音调高", "声调高", "音调提高", "提高音调",
                      "声音高", "高一点的声音", "高一些的声音", "细一点")),
    # voice (preset category)
    ("voice", "elderly", _en("elderly", "old man", "old woman", "old lady", "old person", "grandpa",
                             "grandma", "grandfather", "grandmother", "granny", "old")),
    # no plurals: "for kids", "a children's storyteller" name the listeners, not the voice
    ("voice", "child", _en("child", "child's", "childlike", "kid", "kid's",
                           "boy", "boy's", "girl", "girl's", "little girl", "little boy")),
    ("voice", "male", _en("male", "man", "man's", "men's", "masculine", "gentleman")),
    ("voice", "female", _en("female", "woman", "woman's", "women's", "feminine", "lady", "lady's")),
    ("voice", "elderly", _zh("老人", "老年", "老爷爷", "老奶奶", "老太太", "老头", "苍老", "爷爷",
                             "奶奶")),
    ("voice", "child", _zh("童声", "孩子", "小孩", "儿童", "男孩", "女孩", "小朋友", "娃娃音")),
    ("voice", "male", _zh("男声", "男生", "男性", "男人", "男的", "男")),
    ("voice", "female", _zh("女声", "女生", "女性", "女人", "女的", "女")),
    # emotions
    ("emotion", "happy", _en("happy", "happily", "cheerful", "cheerfully", "joyful", "joyfully",
                             "glad", "upbeat", "smiling", "with a smile")),
    ("emotion", "sad", _en("sad", "sadly", "sorrowful", "sorrowfully", "melancholy", "gloomy",
                           "unhappy", "mournful", "depressed")),
    ("emotion", "angry", _en("angry", "angrily", "furious", "furiously", "mad", "annoyed", "irritated")),
    ("emotion", "calm", _en("calm", "calmly", "relaxed", "soothing", "peaceful", "serene", "steady")),
    ("emotion", "excited", _en("excited", "excitedly", "enthusiastic", "enthusiastically",
                               "energetic", "energetically", "thrilled", "lively")),
    ("emotion", "whisper", _en("whisper", "whispering", "whispered", "whispery")),
    ("emotion", "gentle", _en("gentle", "gently", "warm", "warmly", "tender", "tenderly",
                              "kind(?! of)", "kindly", "soothingly")),
    ("emotion", "serious", _en("serious", "seriously", "formal", "formally", "solemn", "solemnly",
                               "stern", "sternly")),
    ("emotion", "surprised", _en("surprised", "astonished", "amazed")),
    ("emotion", "fearful", _en("scared", "afraid", "fearful", "frightened", "nervous", "nervously")),
    ("emotion", "happy", _zh("开心", "高兴", "快乐", "愉快", "欢快", "喜悦", "欢乐", "兴高采烈",
                             "笑着", "活泼")),
    ("emotion", "sad", _zh("伤心", "难过", "悲伤", "悲痛", "哀伤", "忧伤", "沮丧", "低落")),
    ("emotion", "angry", _zh("生气", "愤怒", "恼火", "气愤", "发火", "怒气")),
    ("emotion", "calm", _zh("平静", "冷静", "沉稳", "平和", "舒缓", "安静", "淡定")),
    ("emotion", "excited", _zh("激动", "兴奋", "激昂", "热情", "慷慨激昂", "有活力")),
    ("emotion", "whisper", _zh("耳语", "悄悄", "轻声细语", "低语", "悄声", "气声说")),
    ("emotion", "gentle", _zh("温柔", "温暖", "柔和", "亲切", "温和", "暖暖")),
    ("emotion", "serious", _zh("严肃", "正式", "庄重", "郑重")),
    ("emotion", "surprised", _zh("惊讶", "吃惊", "惊奇")),
    ("emotion", "fearful", _zh("害怕", "恐惧", "紧张", "胆怯")),
    # languages (reading language; nothing is translated)
    ("language", "en", _en("english", r"in english") + "|" + _zh("英语", "英文")),
    ("language", "zh", _en("chinese", "mandarin") + "|" + _zh("中文", "汉语", "普通话", "国语")),
    ("language", "ja", _en("japanese") + "|" + _zh("日语", "日文")),
    ("language", "ko", _en("korean") + "|" + _zh("韩语", "韩文", "朝鲜语")),
    ("language", "fr", _en("french") + "|" + _zh("法语", "法文")),
    ("language", "de", _en("german") + "|" + _zh("德语", "德文")),
    ("language", "es", _en("spanish") + "|" + _zh("西班牙语")),
    ("language", "ru", _en("russian") + "|" + _zh("俄语")),
    # explicit speed factors ("twice as fast", "半速"; "1.5x", "1.2倍速", "speed 0.8")
    ("speed_value", 2.0, _en("twice as fast", "twice the speed", "double speed", "double the speed")
     + "|" + _zh("两倍速", "二倍速", "双倍速")),
    ("speed_value", 0.5, _en("half speed", "half the speed", "half as fast", "twice as slow")
     + "|" + _zh("半速", "一半的速度", "一半速度")),
    ("speed_value", None, r"(\d+(?:\.\d+)?)\s*(?:x|×|倍速)(?![a-z])"
                          r"|(?<![a-z])speed\s*(?:of\s*)?(\d+(?:\.\d+)?)"),
]

_DIALECTS_ZH = {
    "四川话": "Sichuanese", "川话": "Sichuanese", "粤语": "Cantonese", "广东话": "Cantonese",
    "上海话": "Shanghainese", "东北话": "Northeastern Mandarin", "天津话": "Tianjin dialect",
    "河南话": "Henan dialect", "山东话": "Shandong dialect", "闽南话": "Hokkien", "闽南语": "Hokkien",
    "台湾腔": "Taiwanese accent", "台湾话": "Taiwanese Hokkien", "长沙话": "Changsha dialect",
    "湖南话": "Hunanese", "湖北话": "Hubei dialect", "陕西话": "Shaanxi dialect",
    "重庆话": "Chongqing dialect", "北京话": "Beijing dialect", "京腔": "Beijing accent",
    "郑州话": "Zhengzhou dialect", "武汉话": "Wuhan dialect", "南京话": "Nanjing dialect",
    "杭州话": "Hangzhou dialect", "苏州话": "Suzhou dialect", "温州话": "Wenzhou dialect",
    "客家话": "Hakka", "潮汕话": "Teochew", "山西话": "Shanxi dialect", "甘肃话": "Gansu dialect",
    "宁夏话": "Ningxia dialect", "云南话": "Yunnan dialect", "贵州话": "Guizhou dialect",
    "江西话": "Gan dialect", "吴语": "Wu Chinese", "儿化音": "Beijing erhua",
}
_DIALECTS_EN = {
    "cantonese": "Cantonese", "sichuanese": "Sichuanese", "shanghainese": "Shanghainese",
    "hokkien": "Hokkien", "hakka": "Hakka", "cockney": "Cockney accent", "scouse": "Scouse accent",
}

_UNSUPPORTED: list[tuple[str, str]] = [
    # (label, regex); the label is shown as "<label> (not supported by this engine)"
    ("dialect: {dialect}", _zh(*sorted(_DIALECTS_ZH, key=len, reverse=True)) + "|"
     + _en(*_DIALECTS_EN)),
    ("dialect: {match}", r"[\u4e00-\u9fff]{1,4}(?:方言|口音)|方言|口音"),
    ("accent: {match}", r"(?<![a-z])(?:an? )?(?:[a-z]+ ){0,2}accent(?![a-z])|(?<![a-z])dialect(?![a-z])"),
    ("singing", _en("sing", "sings", "singing", "sung", "song", "rap", "rapping", "chant")
     + "|" + _zh("唱歌", "唱出来", "唱", "说唱", "哼唱", "歌唱")),
    ("style: {match}", _en("robot", "robotic", "like a robot", "peppa pig", "news anchor",
                           "newsreader", "cartoon", "pirate", "darth vader", "drunk")
     + "|" + _zh("机器人", "小猪佩奇", "播音腔", "新闻联播", "卡通", "撒娇", "醉醺醺", "娘娘腔")),
    ("crying", _en("cry", "crying", "sob", "sobbing", "tearful", "tearfully") + "|"
     + _zh("哭腔", "哭着", "哭", "抽泣")),
    ("laughter", _en("laugh", "laughing", "giggle", "giggling", "chuckle") + "|" + _zh("大笑", "哈哈笑")),
    ("breathy voice", _en("breathy", "husky", "raspy", "hoarse") + "|" + _zh("沙哑", "嘶哑", "气声")),
    ("echo/reverb", _en("echo", "reverb", "echoing") + "|" + _zh("回声", "混响")),
    ("stuttering", _en("stutter", "stuttering", "stammer") + "|" + _zh("结巴", "口吃")),
]

_CUES: list[_Cue] = ([_Cue(k, v, re.compile(p)) for k, v, p in _LEXICON]
                     + [_Cue("unsupported", label, re.compile(p)) for label, p in _UNSUPPORTED])

#: What the embedded engine can do for each emotion: (speed factor, pitch st, gain dB) at intensity 1.
EMOTION_EFFECTS: dict[str, tuple[float, float, float]] = {
    "happy": (1.08, 1.0, 0.0),
    "sad": (0.88, -1.0, -3.0),
    "angry": (1.08, 0.0, 4.0),
    "calm": (0.92, 0.0, -1.0),
    "excited": (1.15, 2.0, 2.0),
    "whisper": (1.0, 0.0, -8.0),
    "gentle": (0.95, 0.0, -2.0),
    "serious": (0.95, -0.5, 0.0),
    "surprised": (1.05, 2.0, 1.0),
    "fearful": (1.08, 1.0, -2.0),
}
#: Emotions that cannot be combined; the later one wins.
_EMOTION_CONFLICTS = {frozenset(p) for p in (("happy", "sad"), ("angry", "calm"), ("excited", "calm"),
                                             ("excited", "sad"), ("angry", "gentle"),
                                             ("happy", "angry"), ("whisper", "angry"))}
#: Parts of an emotion that no post-processing can give; listed under not_supported.
_EMOTION_GAPS = {"whisper": "whispered (breathy) voice quality"}
#: A voice with no preset of its own is approximated: (speed factor, pitch st).
_VOICE_APPROX = {"elderly": (0.9, -1.0)}
_VOICE_NAMES = {"male": "a male voice", "female": "a female voice", "child": "a child's voice",
                "elderly": "an elderly voice"}
_LANGUAGE_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese", "ko": "Korean", "fr": "French",
                   "de": "German", "es": "Spanish", "ru": "Russian"}

_CLAUSE_BREAK = re.compile(r"[,.;:!?、，。；：！？\n]|(?<![a-z])(?:but|and|then|while|yet)(?![a-z])"
                           r"|但是|但|然后|不过|而是|而且|并且|同时|和|又")
_NEG_ZH = re.compile(r"(?:不要|不用|不必|不需要|不能|不想|(?<!特)别|勿|无需|不)[\u4e00-\u9fff]{0,3}$")  # 特别 = very
_NEG_EN = re.compile(r"(?<![a-z])(?:not|don't|dont|do not|never|no|without|isn't|aren't|less|neither"
                     r"|nor)(?![a-z])"
                     r"(?:\s+[\w']+){0,3}\s*$")
#: "too fast" / "太快了" is a complaint about what was heard: read like a negation.
_TOO = re.compile(r"(?:(?<![a-z])too\s+|太)$")
_INTENSITY_BEFORE = [
    (EXTREME, re.compile(r"(?:(?<![a-z])(?:extremely|incredibly|super|insanely"
                         r"|(?:very|really|so)\s+(?:very|really|so))\s+(?:more\s+)?"
                         r"|(?:极其|极度|极|超级|超|无比|非常非常|特别特别)(?:地|的)?)$")),
    (STRONG, re.compile(r"(?:(?<![a-z])(?:very|really|much|so|quite|way|even|particularly)"
                        r"\s+(?:more\s+)?"
                        r"|(?:非常|特别|十分|很|相当|格外|好|尤其|更加)(?:地|的)?)$")),
    (SLIGHT, re.compile(r"(?:(?<![a-z])(?:a (?:little )?bit|a little|slightly|somewhat|a touch|a tad|"
                        r"kind of|sort of|a bit more|a little more)\s+(?:more\s+)?"
                        r"|(?:稍微|稍稍|稍|略微|略|有点儿?|有些|一点点?|微微|一些|稍许)(?:地|的)?)$")),
]
#: A voice word after these names the listeners ("给小朋友讲故事", "for a child"), not the voice.
_AUDIENCE = re.compile(r"(?:(?<![a-z])for\s+(?:(?:the|a|young|little)\s+)*|(?:给|对着?|为|面向)(?:小|这些|那些)?)$")
_INTENSITY_AFTER = [
    (SLIGHT, re.compile(r"^(?:一点儿?|一些|点儿?|些|\s+(?:a (?:little )?bit|a little|slightly)(?![a-z]))")),
    (STRONG, re.compile(r"^(?:得多|很多|多了|得很|\s+(?:a lot|much more)(?![a-z]))")),
    (EXTREME, re.compile(r"^(?:极了|至极)")),
]


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class _Hit:
    """One cue found in the text, with its local modifiers resolved."""

    cue: _Cue
    start: int
    end: int
    phrase: str  # the words shown to the user, modifiers included
    word: str  # the cue's own words
    intensity: float
    negated: bool
    groups: tuple = ()


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+", " ", text).strip()


def _clause_start(text: str, pos: int) -> int:
    """Index where the clause containing ``pos`` begins (negation never crosses a clause)."""
    start = 0
    for m in _CLAUSE_BREAK.finditer(text, 0, pos):
        start = m.end()
    return start


def _modifiers(text: str, start: int, end: int) -> tuple[float, bool, int, int]:
    """Intensity, negation and the phrase span around a cue at text[start:end]."""
    before = text[_clause_start(text, start):start]
    window = before if before.isascii() else before[-12:]
    neg = _NEG_ZH.search(window) or _NEG_EN.search(window) or _TOO.search(window)
    if neg:
        return SLIGHT, True, start - (len(window) - neg.start()), end
    after = text[end:end + 16]
    for level, rx in _INTENSITY_BEFORE:
        m = rx.search(window)
        if m:
            tail = _INTENSITY_AFTER[0][1].search(after)
            return level, False, start - (len(window) - m.start()), end + (tail.end() if tail else 0)
    for level, rx in _INTENSITY_AFTER:
        m = rx.search(after)
        if m:
            return level, False, start, end + m.end()
    return NORMAL, False, start, end


def _scan(text: str) -> list[_Hit]:
    """All cues in ``text``, longest match first where they overlap, in text order."""
    found = []
    for cue in _CUES:
        for m in cue.regex.finditer(text):
            if m.end() > m.start():
                found.append((m.start(), m.end(), cue, m.groups()))
    found.sort(key=lambda f: (-(f[1] - f[0]), f[0]))
    taken: list[tuple[int, int]] = []
    hits: list[_Hit] = []
    for start, end, cue, groups in found:
        if any(start < e and s < end for s, e in taken):
            continue
        taken.append((start, end))
        if cue.kind == "voice" and _AUDIENCE.search(text[_clause_start(text, start):start]):
            continue
        intensity, negated, p0, p1 = _modifiers(text, start, end)
        hits.append(_Hit(cue, start, end, text[p0:p1].strip(), text[start:end], intensity, negated,
                         groups))
    hits.sort(key=lambda h: h.start)
    return hits


# --------------------------------------------------------------------------- planning


#: One control and its amount, as the report lines' parts carry it: ("speed", 0.8), ("pitch", -1.0).
Control = tuple[str, float]
#: A conflict: the phrase that was overridden and the later one that won.
Conflict = tuple[str, str]


def _signed(value: float) -> str:
    """One decimal with its sign, negatives with a true minus sign: "+1.0", "−3.0"."""
    return f"{'−' if math.copysign(1.0, value) < 0 else '+'}{abs(value):.1f}"


def _part(control: Control) -> str:
    """A control as people read it: "speed ×0.80", "pitch −3.0 st", "volume +6.0 dB"."""
    kind, amount = control
    if kind == "speed":
        return f"speed ×{amount:.2f}"
    return f"pitch {_signed(amount)} st" if kind == "pitch" else f"volume {_signed(amount)} dB"


def _parts(controls: Sequence[Control]) -> str:
    return ", ".join(_part(c) for c in controls)


def _left_to(left: Sequence[tuple[str, str]]) -> str:
    """" (speed left to 'slowly'; volume left to 'loudly')": the controls explicit words set."""
    if not left:
        return ""
    return " (" + "; ".join(f"{kind} left to '{phrase}'" for kind, phrase in left) + ")"


def _conflict(conflict: Conflict) -> Note:
    earlier, later = conflict
    return Note(f"conflict: '{earlier}' ignored: the later '{later}' wins", code="instruct_conflict",
                earlier=earlier, later=later)


def _voice_preset(preset: str, category: str, phrase: str) -> Note:
    return Note(f"voice: preset '{preset}' for {_VOICE_NAMES[category]} ('{phrase}')",
                code="instruct_voice_preset", preset=preset, voice=category, phrase=phrase)


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


def _choose_preset(category: str, presets: Sequence[str]) -> str | None:
    for name in presets:
        if name == category or name.startswith(category + "_"):
            return name
    return None


def plan(instruction: str, capabilities: Capabilities, *, presets: Sequence[str] = (),
         native_format: Callable[[str], str] | None = None) -> InstructPlan:
    """Read ``instruction`` into explicit controls for an engine with ``capabilities``.

    ``presets`` are the engine's built-in voices (a voice ask picks the first one of that kind, e.g.
    "male_1"); ``native_format`` is the engine's instruction format when ``capabilities.native_instruct``
    (without one the instruction goes as written).
    """
    if not isinstance(instruction, str):
        raise ParameterError("instruct must be a string, e.g. \"read it slowly\"", code="instruct_not_string")
    if len(instruction) > capabilities.max_instruct_chars:
        raise ParameterError(f"instruct is {len(instruction)} characters; the limit is "
                             f"{capabilities.max_instruct_chars}", code="instruct_too_long",
                             length=len(instruction), limit=capabilities.max_instruct_chars)
    original = instruction.strip()
    if not original:
        return InstructPlan()
    hits = _scan(_normalize(original))
    draft = _Draft(explicit=_explicit_controls(hits))
    draft.add_voice(hits, presets)
    draft.add_emotions(hits)
    draft.add_language(hits, capabilities.languages)
    draft.add_unsupported(hits)
    speed, pitch, gain = draft.finish(capabilities.speed_range)

    if capabilities.native_instruct:
        lines = [Note(f"passed to the model as an instruction: “{original}”", code="instruct_native_passed",
                      instruction=original)]
        lines += _explanation(hits, speed, pitch, gain, draft.voice_category,
                              [name for name, _ in draft.emotions], draft.language)
        result = InstructPlan(instruction=original, speed=speed, pitch_semitones=pitch, gain_db=gain,
                              emotions=tuple(name for name, _ in draft.emotions),
                              applied=tuple(lines), native=True,
                              native_instruction=native_format(original) if native_format else original)
    else:
        if not hits:
            draft.not_supported.append(Note(f"'{original}': no instruction this engine understands; "
                                            "nothing applied", code="instruct_not_understood",
                                            instruction=original))
        result = InstructPlan(instruction=original, speed=speed, pitch_semitones=pitch, gain_db=gain,
                              voice=draft.voice, emotions=tuple(name for name, _ in draft.emotions
                                                                if name not in draft.unheard),
                              language=draft.language if draft.language_ok else None,
                              applied=tuple(draft.applied), not_supported=tuple(draft.not_supported),
                              understood=bool(hits))
    logger.debug("instruct plan for %r: %s", original, result.to_dict())
    return result


def _explicit_controls(hits: list[_Hit]) -> dict[str, tuple[_Hit, list[Conflict]]]:
    """Speed/volume/pitch words: the last one per control wins; returns (winner, its conflicts)."""
    last: dict[str, _Hit] = {}
    notes: dict[str, list[Conflict]] = {}
    for hit in hits:
        kind = "speed" if hit.cue.kind == "speed_value" else hit.cue.kind
        if kind not in ("speed", "volume", "pitch"):
            continue
        prev = last.get(kind)
        if prev is not None and _direction(prev) * _direction(hit) < 0:
            if prev.negated and hit.negated:  # "不要太快也不要太慢": neither way, keep the pace
                last[kind] = dataclasses.replace(hit, cue=_Cue(hit.cue.kind, 0, hit.cue.regex),
                                                 phrase=f"{prev.phrase} … {hit.phrase}",
                                                 negated=False, intensity=NORMAL)
                continue
            notes.setdefault(kind, []).append((prev.phrase, hit.phrase))
        last[kind] = hit
    return {kind: (hit, notes.get(kind, [])) for kind, hit in last.items()}


def _amount(kind: str, hit: _Hit) -> float:
    """Speed factor, semitones or decibels asked by one explicit cue."""
    if kind == "speed":
        return _speed_of(hit)
    step = PITCH_STEP_ST if kind == "pitch" else GAIN_STEP_DB
    return _direction(hit) * step * hit.intensity


@dataclass
class _Draft:
    """The plan while it is being built: amounts so far and the lines for people, in order."""

    explicit: dict[str, tuple[_Hit, list[Conflict]]]
    applied: list[Note] = field(default_factory=list)
    not_supported: list[Note] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    extra_speed: float = 1.0  # from voice approximations and emotions
    extra_pitch: float = 0.0
    extra_gain: float = 0.0
    voice: str | None = None
    voice_category: str | None = None
    emotions: list[tuple[str, _Hit]] = field(default_factory=list)
    unheard: set[str] = field(default_factory=set)  # emotions whose every part an explicit word set
    language: str | None = None
    language_ok: bool = False

    def __post_init__(self) -> None:
        for kind in ("speed", "pitch", "volume"):
            if kind in self.explicit:
                hit, conflicts = self.explicit[kind]
                amount = _amount(kind, hit)
                self.applied.append(Note(f"{_part((kind, amount))} ('{hit.phrase}')", code="instruct_control",
                                         control=kind, amount=amount, phrase=hit.phrase))
                self.conflicts.extend(conflicts)

    def _free(self, kind: str) -> bool:
        """True when no explicit word set this control (so an emotion or voice may)."""
        return kind not in self.explicit

    def add_voice(self, hits: list[_Hit], presets: Sequence[str]) -> None:
        """The last non-negated voice ask picks a preset of that kind, or is approximated/refused."""
        ask: _Hit | None = None
        for h in (h for h in hits if h.cue.kind == "voice"):
            if h.negated:
                self.applied.append(Note(f"voice: not {h.cue.value} ('{h.phrase}'), kept the selected voice",
                                         code="instruct_voice_not", voice=h.cue.value, phrase=h.phrase))
                continue
            if ask is not None and ask.cue.value != h.cue.value:
                self.conflicts.append((ask.phrase, h.phrase))
            ask = h
        if ask is None:
            return
        category = self.voice_category = str(ask.cue.value)
        name = _VOICE_NAMES[category]
        preset = _choose_preset(category, presets)
        if preset is not None:
            self.voice = preset
            self.applied.append(_voice_preset(preset, category, ask.phrase))
        elif category in _VOICE_APPROX:
            speed, pitch = _VOICE_APPROX[category]
            controls: list[Control] = []
            if self._free("speed"):
                self.extra_speed *= speed
                controls.append(("speed", speed))
            if self._free("pitch"):
                self.extra_pitch += pitch
                controls.append(("pitch", pitch))
            if controls:
                self.applied.append(Note(f"voice: {name} approximated by {_parts(controls)} (no such preset)",
                                         code="instruct_voice_approximated", voice=category,
                                         controls=tuple(controls)))
            self.not_supported.append(Note(f"voice: {name} timbre (not supported by this engine)",
                                           code="instruct_voice_timbre", voice=category))
        else:
            self.not_supported.append(Note(f"voice: {name} (no such voice in this engine)",
                                           code="instruct_voice_missing", voice=category))

    def add_emotions(self, hits: list[_Hit]) -> None:
        """Each emotion adds its speed/pitch/gain, except on controls an explicit word has set."""
        for h in (h for h in hits if h.cue.kind == "emotion"):
            name = str(h.cue.value)
            if h.negated:
                self.applied.append(Note(f"emotion: not {name} ('{h.phrase}'), nothing applied for it",
                                         code="instruct_emotion_not", emotion=name, phrase=h.phrase))
                continue
            for other, oh in list(self.emotions):
                if other == name or frozenset((other, name)) in _EMOTION_CONFLICTS:
                    self.emotions.remove((other, oh))
                    if other != name:
                        self.conflicts.append((oh.phrase, h.phrase))
            self.emotions.append((name, h))
        for name, h in self.emotions:
            speed, pitch, gain = EMOTION_EFFECTS[name]
            controls: list[Control] = []
            left: list[tuple[str, str]] = []  # (control, the explicit phrase that set it)
            for kind, present in (("speed", speed != 1.0), ("pitch", pitch != 0.0),
                                  ("volume", gain != 0.0)):
                if not present:
                    continue
                if not self._free(kind):
                    left.append((kind, self.explicit[kind][0].phrase))
                elif kind == "speed":
                    self.extra_speed *= speed ** h.intensity
                    controls.append((kind, speed ** h.intensity))
                elif kind == "pitch":
                    self.extra_pitch += pitch * h.intensity
                    controls.append((kind, pitch * h.intensity))
                else:
                    self.extra_gain += gain * h.intensity
                    controls.append((kind, gain * h.intensity))
            if controls:
                self.applied.append(Note(f"emotion '{name}' ('{h.phrase}') approximated by "
                                         f"{_parts(controls)}{_left_to(left)}",
                                         code="instruct_emotion_approximated", emotion=name,
                                         phrase=h.phrase, controls=tuple(controls), left=tuple(left)))
            else:  # nothing of it would be heard: not applied, and said so
                self.unheard.add(name)
                self.not_supported.append(Note(f"emotion '{name}' ('{h.phrase}'): nothing applied"
                                               f"{_left_to(left)}", code="instruct_emotion_unheard",
                                               emotion=name, phrase=h.phrase, left=tuple(left)))
            if name in _EMOTION_GAPS:
                self.not_supported.append(Note(f"{_EMOTION_GAPS[name]} (not supported by this engine)",
                                               code="instruct_emotion_gap", emotion=name))

    def add_language(self, hits: list[_Hit], languages: Sequence[str]) -> None:
        """The last language named wins; it only sets the reading language (no translation)."""
        asks = [h for h in hits if h.cue.kind == "language" and not h.negated]
        for a, b in zip(asks, asks[1:]):
            if a.cue.value != b.cue.value:
                self.conflicts.append((a.phrase, b.phrase))
        if not asks:
            return
        self.language = str(asks[-1].cue.value)
        name = _LANGUAGE_NAMES.get(self.language, self.language)
        self.language_ok = self.language in languages
        if self.language_ok:
            self.applied.append(Note(f"language: {name} (reading language; the text is not translated)",
                                     code="instruct_language", language=self.language))
        else:
            self.not_supported.append(Note(f"language: {name} (not supported by this engine)",
                                           code="instruct_language_unsupported", language=self.language))

    def add_unsupported(self, hits: list[_Hit]) -> None:
        listed: set[str] = set()
        for h in (h for h in hits if h.cue.kind == "unsupported"):
            label = _unsupported_label(h)
            if h.negated:
                self.applied.append(Note(f"{label}: negated ('{h.phrase}'), nothing to do",
                                         code="instruct_style_negated", style=label, phrase=h.phrase))
            elif label not in listed:
                listed.add(label)
                self.not_supported.append(Note(f"{label} (not supported by this engine)",
                                               code="instruct_style_unsupported", style=label))

    def finish(self, speed_range: tuple[float, float]) -> tuple[float, float, float]:
        """Final (speed, pitch, gain) within limits; limits and conflicts are reported."""
        speed = (_amount("speed", self.explicit["speed"][0]) if "speed" in self.explicit else 1.0)
        speed *= self.extra_speed
        pitch = (_amount("pitch", self.explicit["pitch"][0]) if "pitch" in self.explicit else 0.0)
        pitch += self.extra_pitch
        gain = (_amount("volume", self.explicit["volume"][0]) if "volume" in self.explicit else 0.0)
        gain += self.extra_gain
        lo, hi = speed_range
        final = (round(_clamp(speed, lo, hi), 3), round(_clamp(pitch, *PITCH_RANGE_ST), 2),
                 round(_clamp(gain, *GAIN_RANGE_DB), 2))
        if final[0] != round(speed, 3):
            self.applied.append(Note(f"speed limited to ×{final[0]:.2f} (asked ×{speed:.2f}; "
                                     f"range {lo}–{hi})", code="instruct_speed_limited", speed=final[0],
                                     asked=speed, low=lo, high=hi))
        if final[1] != round(pitch, 2):
            self.applied.append(Note(f"pitch limited to {final[1]:+.1f} st (asked {pitch:+.1f})",
                                     code="instruct_pitch_limited", pitch=final[1], asked=pitch))
        if final[2] != round(gain, 2):
            self.applied.append(Note(f"volume limited to {final[2]:+.1f} dB (asked {gain:+.1f})",
                                     code="instruct_volume_limited", gain=final[2], asked=gain))
        self.not_supported.extend(_conflict(c) for c in self.conflicts)
        return final


def _explanation(hits: list[_Hit], speed: float, pitch: float, gain: float, voice_cat: str | None,
                 emotions: list[str], language: str | None) -> list[Note]:
    """For native engines: how the app reads the instruction (shown, not applied)."""
    controls: list[Control] = [c for c in (("speed", speed), ("pitch", pitch), ("volume", gain))
                               if c[1] != (1.0 if c[0] == "speed" else 0.0)]
    styles = [_unsupported_label(h) for h in hits if h.cue.kind == "unsupported" and not h.negated]
    parts = [_part(c) for c in controls]
    if voice_cat:
        parts.append(_VOICE_NAMES[voice_cat])
    parts += [f"emotion '{e}'" for e in emotions]
    if language:
        parts.append(f"language {_LANGUAGE_NAMES.get(language, language)}")
    parts += styles
    if not parts:
        return []
    return [Note(f"read by the app as: {', '.join(parts)} (explanation only; the model follows the words)",
                 code="instruct_native_reading", controls=tuple(controls), voice=voice_cat,
                 emotions=tuple(emotions), language=language, styles=tuple(styles))]


def _unsupported_label(hit: _Hit) -> str:
    """'dialect: Sichuanese', 'accent: british accent', 'singing' ..."""
    word = re.sub(r"^(?:[\u4e00-\u9fff]*的|用|以|略?带(?:着|有|一?点)?|有点|说|讲|一口|an? |in an? )", "",
                  hit.word).strip()  # "带点广东口音", "很重的湖南口音" -> "广东口音", "湖南口音"
    dialect = _DIALECTS_ZH.get(word) or _DIALECTS_EN.get(word) or word
    return str(hit.cue.value).format(dialect=dialect, match=word)


def _direction(hit: _Hit) -> int:
    """+1 faster/louder/higher, -1 the other way, 0 for an explicit "normal"."""
    if hit.cue.kind == "speed_value":
        return 1 if _value_of(hit) >= 1.0 else -1
    value = float(hit.cue.value)  # type: ignore[arg-type]
    sign = (value > 0) - (value < 0)
    return -sign if hit.negated else sign


def _value_of(hit: _Hit) -> float:
    raw = next((g for g in hit.groups if g), None)
    return _clamp(float(hit.cue.value if raw is None else raw), 0.25, 4.0)  # type: ignore[arg-type]


def _speed_of(hit: _Hit) -> float:
    """The speed factor one cue asks for."""
    if hit.cue.kind == "speed_value":
        return _value_of(hit)
    base = SPEED_FAST if _direction(hit) > 0 else SPEED_SLOW
    scale = abs(float(hit.cue.value))  # type: ignore[arg-type]
    return round(base ** (hit.intensity * scale), 4)


# --------------------------------------------------------------------------- applying


def plan_for_engine(instruction: str, engine: Engine) -> InstructPlan:
    """:func:`plan` with the engine's capabilities and presets; an engine with native instruct also
    has ``format_instruction`` (its model's prompt format, e.g. CosyVoice's per version)."""
    caps = engine.capabilities
    if caps.native_instruct:
        return plan(instruction, caps, native_format=engine.format_instruction)  # type: ignore[attr-defined]
    return plan(instruction, caps, presets=tuple(engine.presets()))


@dataclass(frozen=True)
class Application:
    """What the service runs: options and voice for the engine, and the final plan to report."""

    options: SynthesisOptions
    voice: str | VoicePrompt
    plan: InstructPlan


def apply_plan(plan_: InstructPlan, options: SynthesisOptions, voice: str | VoicePrompt, *,
               speed_range: tuple[float, float] = (0.5, 2.0)) -> Application:
    """Fold a plan into ``options`` (SynthesisOptions) and ``voice`` for one request.

    Embedded engines: speed multiplies the user's speed (clamped to ``speed_range``, said so if it
    is); a voice ask replaces the selected voice unless it already is of that kind; language overrides
    the request's language. Native engines get
    ``options.instruct = plan.native_instruction`` and nothing else: the model reads speed, volume and
    emotion from the words itself, so changing them on top would apply them twice.
    """
    if plan_.native:
        return Application(dataclasses.replace(options, instruct=plan_.native_instruction), voice, plan_)
    applied = list(plan_.applied)
    lo, hi = speed_range
    asked = options.speed * plan_.speed
    speed = _clamp(asked, lo, hi)
    if plan_.speed != 1.0 and not math.isclose(speed, asked, rel_tol=1e-6):
        applied.append(Note(f"speed: your {options.speed:g} × instruction ×{plan_.speed:.2f} = "
                            f"{asked:.2f}, limited to {speed:g} (range {lo:g}–{hi:g})",
                            code="instruct_speed_combined_limited", yours=options.speed,
                            factor=plan_.speed, asked=asked, speed=speed, low=lo, high=hi))
    new_options = dataclasses.replace(options, speed=speed, instruct=None)
    if plan_.language is not None:
        new_options = dataclasses.replace(new_options, language=plan_.language)
    new_voice = voice
    if plan_.voice is not None:
        # "male_2" already is a male voice: keep the user's choice and say so
        kept = isinstance(voice, str) and voice.split("_")[0] == plan_.voice.split("_")[0]
        new_voice = voice if kept else plan_.voice
        applied = [_voice_outcome(line, voice, kept) if code_of(line) == "instruct_voice_preset" else line
                   for line in applied]
    final = dataclasses.replace(plan_, applied=tuple(applied),
                                voice=new_voice if plan_.voice is not None else None)
    return Application(new_options, new_voice, final)


def _voice_outcome(line: Note, voice: str | VoicePrompt, kept: bool) -> Note:
    """The plan's voice line (``instruct_voice_preset``) once the request's own ``voice`` is known:
    that voice ``kept`` (it is of the kind asked for), or the preset used instead of it."""
    preset, category, phrase = line.params["preset"], line.params["voice"], line.params["phrase"]
    if kept:
        return Note(f"voice: your preset '{voice}' kept, for {_VOICE_NAMES[category]} ('{phrase}')",
                    code="instruct_voice_kept", kept=voice, voice=category, phrase=phrase)
    was = voice if isinstance(voice, str) else "the voice of your recording"  # not a clone on every engine
    return Note(f"{_voice_preset(preset, category, phrase)}, instead of '{was}'",
                code="instruct_voice_instead", preset=preset, voice=category, phrase=phrase, instead_of=was,
                recording=not isinstance(voice, str))


def postprocess(audio: np.ndarray, sample_rate: int, plan_: InstructPlan) -> np.ndarray:
    """Pitch shift and gain (with a peak limiter) for embedded engines; native plans pass through."""
    if plan_.native or (plan_.pitch_semitones == 0.0 and plan_.gain_db == 0.0):
        return audio
    from cosyedge.instruct import effects

    out = audio
    if plan_.pitch_semitones:
        out = effects.pitch_shift(out, sample_rate, plan_.pitch_semitones)
    return effects.apply_gain(out, plan_.gain_db, sample_rate)
