"""Which language is each part of a text in: seed tags, script rules, then langdetect.

Rules, in order of strength:

1. **Tags.** ``[zh]``, ``[en]``, ``[ja]`` (any case, with or without a region: ``[en-US]``) set the
   language of the text that follows, up to the next tag; ``[/zh]`` etc. return to the caller's
   language. The seed's ``[mul]...[/mul]`` (and ``[auto]``) mean "detect". Tags for other languages
   (``[fr]``, ``[ko]``, ``[yue]``: any ISO 639-1 code, a few Chinese 639-3 ones) are markup, never
   read aloud: removed, their text detected, and reported in :class:`Unread`. A bracketed code that
   is also a common English word (``[it]``, ``[no]``) counts as a tag only with a region
   (``[it-IT]``), so editorial brackets keep their word. A tag boundary is also a sentence boundary.
2. **Scripts.** Kana is always Japanese and Latin letters are always read by the English G2P (no other
   G2P can read them). Han characters follow the tag; without one they are Japanese when the same
   sentence contains any kana, otherwise Chinese.
3. **Neutral characters** (digits, symbols, punctuation, spaces) join a neighbour: digits written
   directly before Han/kana belong to it ("2024年", "3个"), otherwise they join the run before them,
   else the run after them, else the tag's language, else the caller's default. After a math
   variable in CJK text (one letter, or two or three capitals: "已知a=2", "AB=5cm") they join the
   CJK language before it, so only the letter is read in English.
4. **langdetect** only names the language of Latin-only text, so the log can say when non-English text
   is read with the English G2P. It is seeded (``DetectorFactory.seed = 0``) on first use, so results
   are reproducible, and never at import.

Characters of scripts we do not speak (Hangul, Cyrillic, emoji, ...) are dropped; :func:`segment`
records them, by script, in an :class:`Unread` so the caller can say what was not read.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from typing import Iterator

from ..notes import Note
from .units import UNIT_AFTER_NUMBER

logger = logging.getLogger(__name__)

LANGUAGES = ("zh", "en", "ja")
AUTO = "auto"

#: ISO 639-1 codes, and a few 639-3 codes for Chinese languages: with a region ("[pt-BR]",
#: "[it-IT]") a bracketed one is a language tag.
ISO_LANGUAGES = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv
dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig
ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh
mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru
rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug
uk ur uz ve vi vo wa wo xh yi yo za zh zu yue cmn wuu nan hak
""".split())  # noqa: SIM905 - a block of codes reads better than 189 quoted strings
#: Other languages' codes that are a tag without a region: common in TTS markup, and not a unit
#: ("[ms]", "[kg]"), an abbreviation ("[NB]", "[UK]", "[VI]") or an English word ("[it]") in brackets.
BARE_TAG_CODES = frozenset(("fr", "de", "es", "ru", "ko", "yue", "cmn", "wuu", "nan", "hak"))
_TAG = re.compile(r"\[(/?)([A-Za-z]{2,4})((?:[-_][A-Za-z0-9]{2,8})*)\]")
#: BCP-47 region / script subtags as written: "-US", "-Hans", "-419" ("[to-do]", "[co-op]" are text).
_REGION = re.compile(r"(?:[-_](?:[A-Z]{2}|[A-Z][a-z]{3}|[0-9]{3}))+")
#: On our own languages a lower-case region is common too ("[zh-cn]", "[en-us]").
_OWN_REGION = re.compile(r"(?:[-_](?:[A-Za-z]{2}|[A-Z][a-z]{3}|[0-9]{3}))+")


def is_language_tag(code: str, region: str) -> bool:
    """Whether a bracketed ``code`` + ``region`` ("fr", "-FR") is a language tag, not text."""
    code = code.lower()
    if code in (*LANGUAGES, "mul", "auto"):
        return not region or _OWN_REGION.fullmatch(region) is not None
    if not region:
        return code in BARE_TAG_CODES
    return code in ISO_LANGUAGES and _REGION.fullmatch(region) is not None


_SENTENCE_END = re.compile(r"(?<=[。．！？!?\n])")

HAN, KANA, LATIN, DIGIT, NEUTRAL, OTHER = "han", "kana", "latin", "digit", "neutral", "other"
SYMBOLS = "symbols"  # Unread's name for dropped characters that are no letters (digits, signs)


@dataclass(frozen=True)
class Run:
    """A stretch of text in one language; ``new_block`` is True where a tag started it."""

    language: str
    text: str
    new_block: bool = False


def char_class(ch: str) -> str:
    """Script class of one character (see module docstring)."""
    code = ord(ch)
    if ch.isascii():
        if ch.isalpha():
            return LATIN
        if ch.isdigit():
            return DIGIT
        return NEUTRAL
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF \
            or 0x20000 <= code <= 0x3134F or ch == "〇":
        return HAN
    if 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or ch in "々〆ゝゞ":
        return KANA
    if 0x00C0 <= code <= 0x024F and ch not in "×÷":
        return LATIN
    if ch.isalpha() or ch.isdigit() or _is_pictograph(code):
        return OTHER  # letters of other scripts, non-ASCII digits, emoji
    return NEUTRAL  # punctuation, symbols (°, ℃, €, ¥, —, …), spaces


def _is_pictograph(code: int) -> bool:
    return 0x1F000 <= code <= 0x1FAFF or 0x2600 <= code <= 0x27BF or code in (0xFE0F, 0x20E3)


@dataclass
class Unread:
    """What :func:`segment` did not read aloud: language tags it removed as markup (other than
    zh/en/ja/mul/auto) and words in scripts no G2P here reads, by script name."""

    tags: list[str] = field(default_factory=list)
    words: dict[str, list[str]] = field(default_factory=dict)  # script -> dropped words, in order
    chars: dict[str, int] = field(default_factory=dict)  # script -> dropped characters
    _last: str = field(default="", repr=False)  # script of the last dropped character

    SHOWN = 3  # words quoted per script; the count covers all characters
    QUOTE_CHARS = 20  # a quoted word is cut after this many characters (the report is a header too)

    def add_char(self, ch: str, continues: bool) -> None:
        """Record a dropped character; ``continues``: it directly follows the last dropped one."""
        script = script_name(ch)
        words = self.words.setdefault(script, [])
        self.chars[script] = self.chars.get(script, 0) + 1
        if continues and words and self._last == script:
            words[-1] += ch
        else:
            words.append(ch)
        self._last = script

    def notes(self) -> list[Note]:
        """One short line per tag and per script, e.g. "tag [fr] not read aloud: ..."."""
        out = [Note(f"tag {tag} not read aloud: this engine speaks zh, en and ja; the text after it was "
                    "read by its script (Latin letters as English)", code="tag_not_read", tag=tag)
               for tag in self.tags]
        for script, words in self.words.items():
            unique = list(dict.fromkeys(
                w if len(w) <= self.QUOTE_CHARS else w[:self.QUOTE_CHARS] + "…" for w in words))
            shown = ", ".join(unique[:self.SHOWN]) + (", …" if len(unique) > self.SHOWN else "")
            count = self.chars[script]
            if script == "emoji":
                out.append(Note(f"{count} emoji not read ({shown})", code="emoji_not_read", count=count,
                                shown=shown))
            elif script == SYMBOLS:
                out.append(Note(f"{count} symbol{'s' if count > 1 else ''} not read ({shown})",
                                code="symbols_not_read", count=count, shown=shown))
            else:
                out.append(Note(f"{count} {script} character{'s' if count > 1 else ''} not read "
                                f"({shown}): this engine reads Chinese, English and Japanese only",
                                code="script_not_read", count=count, script=script, shown=shown))
        return out


def script_name(ch: str) -> str:
    """The script of a character, as a name for people ("Hangul", "Cyrillic", "emoji")."""
    if _is_pictograph(ord(ch)):
        return "emoji"
    if not unicodedata.category(ch).startswith("L") or " SIGN" in unicodedata.name(ch, ""):
        return SYMBOLS  # "²", "①", "µ" (MICRO SIGN): not a language's script
    words = unicodedata.name(ch, "").split()
    while words and words[0] in ("HALFWIDTH", "FULLWIDTH", "SMALL", "CAPITAL", "MODIFIER"):
        words = words[1:]
    return words[0].capitalize() if words else f"U+{ord(ch):04X}"


def parse_tags(text: str, language: str = AUTO, unread: Unread | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(language_or_auto, block_text)`` for the stretches between seed tags; tags for other
    languages are removed (listed in ``unread``), bracketed words that are no tag stay text."""
    pos = 0
    current = language
    for match in _TAG.finditer(text):
        closing, code, region = match.group(1), match.group(2).lower(), match.group(3)
        if not is_language_tag(code, region):
            continue  # "[sic]", "[it]", "[ms]", "[to-do]": ordinary text
        if match.start() > pos:
            yield current, text[pos:match.start()]
        if closing:
            current = language
        elif code in LANGUAGES:
            current = code
        else:
            if code not in ("mul", "auto"):
                logger.info("tag %s names a language this engine cannot speak; detecting instead",
                            match.group(0))
                if unread is not None and match.group(0) not in unread.tags:
                    unread.tags.append(match.group(0))
            current = AUTO
        pos = match.end()
    if pos < len(text):
        yield current, text[pos:]


_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese"}


@dataclass
class Unapplied:
    """Where a language setting other than auto was not applied: the letters of untagged text that
    :func:`segment` read in another language by their script, counted per language. Tags are the
    user's own choice and are not counted."""

    language: str
    letters: dict[str, int] = field(default_factory=dict)  # language read instead -> letters

    def add_block(self, block_language: str, runs: list[Run]) -> None:
        """Count one tag block's runs (only a block that the setting, not a tag, gave its language)."""
        if self.language not in LANGUAGES or block_language != self.language:
            return
        for run in runs:
            if run.language != self.language:
                letters = sum(1 for ch in run.text if ch.isalpha())
                self.letters[run.language] = self.letters.get(run.language, 0) + letters

    def notes(self) -> list[Note]:
        """One line per language read instead ("language en not applied to 6 characters: ...")."""
        return [Note(f"language {self.language} not applied to {count} character{'s' if count > 1 else ''}: "
                     f"read as {_NAMES[other]} by their script (Latin letters as English, kana as Japanese, "
                     f"Chinese characters as Chinese unless the language is ja)",
                     code="language_not_applied", language=self.language, count=count, read_as=other)
                for other, count in self.letters.items() if count]


def language_notes(text: str, language: str, default: str = "zh") -> list[Note]:
    """What a language setting other than auto did not decide: one note per language that untagged
    characters were read in instead, by their script ("English" over Chinese characters reads them
    as Chinese, exactly as auto does); see :class:`Unapplied`."""
    if language not in LANGUAGES:
        return []
    unapplied = Unapplied(language)
    segment(text, language, default, unapplied=unapplied)
    return unapplied.notes()


def segment(text: str, language: str = AUTO, default: str = "zh", unread: Unread | None = None,
            unapplied: Unapplied | None = None) -> list[Run]:
    """Split ``text`` (tags allowed) into runs of one language each, in order; what is not read
    (other languages' tags, unsupported scripts) is recorded in ``unread`` and where the language
    setting was not applied in ``unapplied``, when given."""
    runs: list[Run] = []
    for block_language, block in parse_tags(text, language, unread):
        block_runs = _segment_block(block, block_language, default, unread)
        if unapplied is not None:
            unapplied.add_block(block_language, block_runs)
        if block_runs:
            first = block_runs[0]
            block_runs[0] = Run(first.language, first.text, new_block=bool(runs))
            runs.extend(block_runs)
    return runs


def _segment_block(block: str, tag: str, default: str, unread: Unread | None = None) -> list[Run]:
    """Runs for one tag block; see the module rules 2 and 3."""
    labels: list[str | None] = []  # a language, or None for neutral characters
    chars: list[str] = []
    dropped = 0
    previous_other = False
    # unit names glued to numbers ("100km") are read with the number, in the number's language
    unit_chars = {i for m in UNIT_AFTER_NUMBER.finditer(block) for i in range(*m.span(2))}
    offset = 0
    for sentence in _SENTENCE_END.split(block):
        has_kana = any(char_class(c) == KANA for c in sentence)
        han_language = tag if tag in ("zh", "ja") else ("ja" if has_kana else "zh")
        for ch in sentence:
            cls = NEUTRAL if offset in unit_chars else char_class(ch)
            offset += 1
            if cls == OTHER:
                dropped += 1
                if unread is not None:
                    unread.add_char(ch, continues=previous_other)
                previous_other = True
                ch, cls = " ", NEUTRAL
            else:
                previous_other = False
            chars.append(ch)
            labels.append({HAN: han_language, KANA: "ja", LATIN: "en"}.get(cls))
    if dropped:
        logger.debug("dropped %d characters of unsupported scripts", dropped)
    fallback = tag if tag in LANGUAGES else default
    _resolve_neutral(chars, labels, fallback)
    runs: list[Run] = []
    start = 0
    for i in range(1, len(chars) + 1):
        if i == len(chars) or labels[i] != labels[start]:
            piece = "".join(chars[start:i])
            if piece.strip():
                runs.append(Run(labels[start] or fallback, piece))
            start = i
    return runs


def _resolve_neutral(chars: list[str], labels: list[str | None], fallback: str) -> None:
    """Give every neutral stretch a language, in place (rule 3)."""
    n = len(labels)
    i = 0
    while i < n:
        if labels[i] is not None:
            i += 1
            continue
        j = i
        while j < n and labels[j] is None:
            j += 1
        before = labels[i - 1] if i > 0 else None
        after = labels[j] if j < n else None
        if before == "en" and any(c.isdigit() or c in _MATH for c in chars[i:j]):
            # after a math variable in CJK text ("已知a=2", "函数y=2x+1", "AB=5cm"), the symbols and
            # numbers belong to the sentence's language, not to the one letter's English
            before = _language_around_variable(chars, labels, i) or before
        tail = j
        while tail > i and chars[tail - 1] not in " \n":
            tail -= 1
        if after in ("zh", "ja") and any(c.isdigit() for c in chars[tail:j]):
            # digits glued to CJK belong to it ("2024年", "Python 3版本"); the rest stays behind
            split = tail
        else:
            split = j
        for m in range(i, split):
            labels[m] = before or after or fallback
        for m in range(split, j):
            labels[m] = after
        i = j


_VARIABLE = re.compile(r"[A-Za-z]|[A-Z]{2,3}")
_MATH = set("=+-−×÷*/<>≤≥≠^%")


def _language_around_variable(chars: list[str], labels: list[str | None], end: int) -> str | None:
    """The CJK language of the text around an English run ending at ``end`` that is only a variable
    name (one letter, or two or three capitals: a, x, AB, ABC); None when it is a word, or when no
    CJK text comes before it."""
    start = end
    while start > 0 and labels[start - 1] == "en":
        start -= 1
    if not _VARIABLE.fullmatch("".join(chars[start:end]).strip()):
        return None
    for k in range(start - 1, -1, -1):
        if labels[k] in ("zh", "ja"):
            return labels[k]
        if labels[k] == "en" and chars[k].isalpha():
            return None  # another English word before it: an English phrase, not a variable
    return None


_detector_lock = threading.Lock()
_detector_ready = False


def load_detector() -> None:
    """Seed langdetect and load its 55 language profiles (0.25-0.35 s, once per process). The
    Kokoro engine calls it at load, so the first Latin-only request does not pay it (measured: the
    text frontend on the first English text after load took 332 ms before, 3 ms after)."""
    global _detector_ready
    with _detector_lock:
        if _detector_ready:
            return
        from langdetect import DetectorFactory, detector_factory

        DetectorFactory.seed = 0
        detector_factory.init_factory()
        _detector_ready = True


def detect_language(text: str) -> str | None:
    """Best guess of the main language of ``text`` (ISO code such as "zh", "ja", "en", "fr").

    Script rules first (kana -> ja, Han -> zh); for Latin-only text langdetect decides. Returns None
    when the text has no letters at all.
    """
    counts = {HAN: 0, KANA: 0, LATIN: 0}
    for ch in text:
        cls = char_class(ch)
        if cls in counts:
            counts[cls] += 1
    if counts[KANA]:
        return "ja"
    if counts[HAN]:
        return "zh"
    if not counts[LATIN]:
        return None
    from langdetect import detect
    from langdetect.lang_detect_exception import LangDetectException

    load_detector()
    try:
        return detect(text[:2000])
    except LangDetectException:
        return "en"
