"""One reading of a dictionary entry, checked and parsed into what every engine reads.

* **Mandarin**: toned pinyin, one syllable per character, written with tone numbers (``yin2 hang2``,
  ``de5`` or ``de0`` for the neutral tone, ``lv4``/``lü4`` for ü) or tone marks (``yín háng``; a
  syllable without a mark is neutral). Parsed into :attr:`Reading.syllables` in the numbered form
  (``"yin2"``, ``"lv4"``). A syllable Mandarin does not have (:data:`SYLLABLES`) or a tone outside 1-5
  is refused, naming it.
* **English**: IPA (``/ˈnaɪs/``, slashes optional) or ARPAbet (``N AY1 S``: upper case, stress digits
  on vowels, as in CMUdict). Both are parsed into ARPAbet phones (:attr:`Reading.phones`, what
  Fun-CosyVoice3 reads); the IPA as typed is kept too (:attr:`Reading.ipa`, what Kokoro reads). An
  IPA symbol outside :data:`IPA_SYMBOLS` or a phone outside ARPAbet is refused, naming it.
* **Japanese**: kana only (hiragana, katakana, ``ー``).

Every refusal is a :class:`~cosyedge.errors.ReadingError` with a code and the entry's word in its
params, so the page and REST name the entry.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from cosyedge.errors import ReadingError

LANGUAGES = ("zh", "en", "ja")
LANGUAGE_NAMES = {"zh": "Mandarin", "en": "English", "ja": "Japanese"}
#: Longest word and reading an entry may have (characters).
MAX_WORD_CHARS = 32
MAX_READING_CHARS = 160
#: Sentence punctuation (and clause marks): a reading or word with one would end or cut a sentence.
SENTENCE_PUNCTUATION = frozenset("。．.!?！？;；:：,，、…\n")

#: Every Mandarin syllable without its tone, ü written ``v`` (from pypinyin 0.55's character table).
SYLLABLES = frozenset("""
a ai an ang ao ba bai ban bang bao bei ben beng bi bian biang biao bie bin bing bo bong bu ca cai can
cang cao ce cei cen ceng cha chai chan chang chao che chen cheng chi chong chou chu chua chuai chuan
chuang chui chun chuo ci cong cou cu cuan cui cun cuo da dai dan dang dao de dei den deng di dia dian
diao die din ding diu dong dou du duan dui dun duo e ei en eng er fa fan fang fei fen feng fiao fo fou
fu ga gai gan gang gao ge gei gen geng gong gou gu gua guai guan guang gui gun guo ha hai han hang hao
he hei hen heng hm hng hong hou hu hua huai huan huang hui hun huo ji jia jian jiang jiao jie jin jing
jiong jiu ju juan jue jun ka kai kan kang kao ke kei ken keng kong kou ku kua kuai kuan kuang kui kun
kuo la lai lan lang lao le lei len leng li lia lian liang liao lie lin ling liu lo long lou lu luan lun
luo lv lve m ma mai man mang mao me mei men meng mi mian miao mie min ming miu mo mou mu n na nai nan
nang nao ne nei nen neng ng ni nia nian niang niao nie nin ning niu nong nou nu nuan nun nuo nv nve o
ou pa pai pan pang pao pei pen peng pi pian piao pie pin ping po pou pu qi qia qian qiang qiao qie qin
qing qiong qiu qu quan que qun ran rang rao re ren reng ri rong rou ru rua ruan rui run ruo sa sai san
sang sao se sen seng sha shai shan shang shao she shei shen sheng shi shou shu shua shuai shuan shuang
shui shun shuo si song sou su suan sui sun suo ta tai tan tang tao te tei teng ti tian tiao tie ting
tong tou tu tuan tui tun tuo wa wai wan wang wei wen weng wo wong wu xi xia xian xiang xiao xie xin
xing xiong xiu xu xuan xue xun ya yan yang yao ye yi yin ying yo yong you yu yuan yue yun za zai zan
zang zao ze zei zen zeng zha zhai zhan zhang zhao zhe zhei zhen zheng zhi zhong zhou zhu zhua zhuai
zhuan zhuang zhui zhun zhuo zi zong zou zu zuan zui zun zuo ê
""".split())
#: Pinyin initials, two-letter ones first (``y`` and ``w`` count as initials, as written).
INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "r",
            "z", "c", "s", "y", "w")
_TONE_MARKS = {"a": "āáǎà", "e": "ēéěè", "i": "īíǐì", "o": "ōóǒò", "u": "ūúǔù", "ü": "ǖǘǚǜ"}
_UNMARK = {mark: (vowel, tone + 1) for vowel, marks in _TONE_MARKS.items() for tone, mark in enumerate(marks)}

#: ARPAbet as CMUdict writes it: vowels take a stress digit (0, 1, 2).
ARPABET_VOWELS = frozenset("AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split())
ARPABET_CONSONANTS = frozenset("B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split())
_ARPABET_PHONE = re.compile(r"([A-Z]{1,2})([012]?)")

#: IPA for English -> ARPAbet, longest first; the symbols a reading may use (plus :data:`IPA_MARKS`).
_IPA_TO_ARPABET = (
    ("tʃ", "CH"), ("dʒ", "JH"), ("eɪ", "EY"), ("aɪ", "AY"), ("aʊ", "AW"), ("ɔɪ", "OY"), ("oʊ", "OW"),
    ("əʊ", "OW"), ("ɜːɹ", "ER"), ("ɜɹ", "ER"), ("ɜː", "ER"), ("əɹ", "ER"),
    ("ʧ", "CH"), ("ʤ", "JH"), ("ɝ", "ER"), ("ɚ", "ER"), ("ɜ", "ER"),
    ("i", "IY"), ("ɪ", "IH"), ("ᵻ", "IH"), ("ɨ", "IH"), ("e", "EH"), ("ɛ", "EH"), ("æ", "AE"), ("a", "AA"),
    ("ɑ", "AA"), ("ɒ", "AA"), ("ɔ", "AO"), ("o", "OW"), ("ʊ", "UH"), ("u", "UW"), ("ʌ", "AH"), ("ə", "AH"),
    ("ɐ", "AH"),
    ("p", "P"), ("b", "B"), ("t", "T"), ("d", "D"), ("k", "K"), ("ɡ", "G"), ("g", "G"), ("m", "M"), ("n", "N"),
    ("ŋ", "NG"), ("f", "F"), ("v", "V"), ("θ", "TH"), ("ð", "DH"), ("s", "S"), ("z", "Z"), ("ʃ", "SH"),
    ("ʒ", "ZH"), ("h", "HH"), ("ɹ", "R"), ("r", "R"), ("l", "L"), ("ɫ", "L"), ("w", "W"), ("j", "Y"),
    ("ɾ", "T"), ("ʔ", "T"),
)
#: Stress, length, syllabic and tie marks an English IPA reading may carry.
IPA_MARKS = frozenset("ˈˌːˑ\u0329\u0361\u035c ")
IPA_SYMBOLS = frozenset(ch for ipa, _ in _IPA_TO_ARPABET for ch in ipa) | IPA_MARKS
_STRESS = {"ˈ": "1", "ˌ": "2"}

_KANA = re.compile(r"[\u3041-\u3096\u309d\u309e\u30a1-\u30fa\u30fc-\u30fe]+")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f〇]")


@dataclass(frozen=True)
class Reading:
    """A checked reading: ``text`` as it is stored, and its parts per language."""

    language: str
    text: str
    #: Mandarin: one numbered syllable per character ("yin2", "lv4", "de5").
    syllables: tuple[str, ...] = ()
    #: English: ARPAbet phones with their stress digits ("N", "AY1", "S").
    phones: tuple[str, ...] = ()
    #: English written in IPA: the IPA as typed, without slashes ("" when written in ARPAbet).
    ipa: str = ""
    #: Japanese: the kana.
    kana: str = ""


def about(word: str, message: str) -> str:
    """A refusal's message, naming the entry's word first."""
    return f"pronunciation entry {word!r}: {message}"


def check_characters(value: str, what: str, word: str) -> None:
    """Refuse control, format (zero-width) and line-separator characters, and sentence punctuation."""
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            raise ReadingError(about(word, f"the {what} contains an invisible or control character "
                                           f"(U+{ord(ch):04X}); type it again without it"),
                               code="reading_control_chars", word=word, what=what, character=f"U+{ord(ch):04X}")
        if ch in SENTENCE_PUNCTUATION:
            raise ReadingError(about(word, f"the {what} contains the punctuation mark {ch!r}, which would "
                                           "end or cut the sentence; leave it out"),
                               code="reading_punctuation", word=word, what=what, mark=ch)


def parse_reading(language: str, reading: str, word: str) -> Reading:
    """Check ``reading`` for ``language`` and parse it (see the module docstring); ``word`` names the
    entry in a refusal and gives Mandarin its character count."""
    if language not in LANGUAGES:
        raise ReadingError(about(word, f"language {language!r} is not one the dictionary "
                                       f"holds ({', '.join(LANGUAGES)})"),
                           code="reading_language_unknown", word=word, language=language)
    if not isinstance(reading, str) or not reading.strip():
        raise ReadingError(about(word, "the reading is empty"),
                           code="reading_empty", word=word)
    reading = unicodedata.normalize("NFC", reading.strip())
    if len(reading) > MAX_READING_CHARS:
        raise ReadingError(about(word, f"the reading is {len(reading)} characters; the limit is "
                                       f"{MAX_READING_CHARS}"),
                           code="reading_too_long", word=word, length=len(reading), limit=MAX_READING_CHARS)
    check_characters(reading, "reading", word)
    if language == "zh":
        return _mandarin(reading, word)
    if language == "en":
        return _english(reading, word)
    return _japanese(reading, word)


# --- Mandarin --------------------------------------------------------------------------------------


def _mandarin(reading: str, word: str) -> Reading:
    tokens = reading.lower().split()
    numbered = any(t[-1].isdigit() for t in tokens)
    syllables = []
    for token in tokens:
        syllables.append(_syllable(token, numbered, word))
    if not numbered and not any(any(ch in _UNMARK for ch in t) for t in tokens):
        raise ReadingError(about(word, f"{reading!r} has no tones: write them as numbers (yin2 hang2, "
                                       "5 for the neutral tone) or marks (yín háng)"),
                           code="reading_tone_missing", word=word, reading=reading)
    characters = len(_HAN.findall(word))
    if characters and characters != len(syllables):
        raise ReadingError(about(word, f"the reading has {len(syllables)} syllable(s) for "
                                       f"{characters} character(s); write one syllable per character"),
                           code="reading_syllable_count", word=word, syllables=len(syllables), characters=characters)
    return Reading("zh", " ".join(syllables), syllables=tuple(syllables))


def _syllable(token: str, numbered: bool, word: str) -> str:
    """One pinyin token as a numbered syllable ("háng" -> "hang2", "lü4" -> "lv4")."""
    tone = 5
    if numbered:
        if not token[-1].isdigit():
            raise ReadingError(about(word, f"the syllable {token!r} has no tone number (1-4, or 5 for "
                                           "the neutral tone)"),
                               code="reading_tone_missing", word=word, syllable=token)
        base, digit = token[:-1], int(token[-1])
        if digit not in (0, 1, 2, 3, 4, 5) or base[-1:].isdigit():
            raise ReadingError(about(word, f"the syllable {token!r} has tone {token[len(base):]}; "
                                           "Mandarin tones are 1-4, and 5 (or 0) for the neutral tone"),
                               code="reading_tone_out_of_range", word=word, syllable=token)
        tone = digit or 5
    else:
        marked = [ch for ch in token if ch in _UNMARK]
        if len(marked) > 1:
            raise ReadingError(about(word, f"the syllable {token!r} has {len(marked)} tone marks"),
                               code="reading_pinyin_unknown", word=word, syllable=token)
        base = token
        if marked:
            vowel, tone = _UNMARK[marked[0]]
            base = token.replace(marked[0], vowel)
        if any(ch.isdigit() for ch in base):
            raise ReadingError(about(word, f"the syllable {token!r} mixes a tone mark and a number"),
                               code="reading_tone_out_of_range", word=word, syllable=token)
    base = base.replace("ü", "v")
    if base[:1] in ("j", "q", "x", "y") and base[1:2] == "v":  # ü after j/q/x/y is written u
        base = base[0] + "u" + base[2:]
    if base not in SYLLABLES:
        raise ReadingError(about(word, f"{token!r} is not a Mandarin syllable"),
                           code="reading_pinyin_unknown", word=word, syllable=token)
    return f"{base}{tone}"


def initial_final(syllable: str) -> tuple[str, str, int]:
    """A numbered syllable split as written: ("hang2") -> ("h", "ang", 2); ("ai4") -> ("", "ai", 4)."""
    base, tone = syllable[:-1], int(syllable[-1])
    for initial in INITIALS:
        if base.startswith(initial) and len(base) > len(initial):
            return initial, base[len(initial):], tone
    return "", base, tone


def marked_final(final: str, tone: int) -> str:
    """A final with its tone mark where pinyin puts it (a, then e, then the o of ou, else the last
    vowel); ü is written ü alone (lǜ) and v before e (lvè), as CosyVoice3's phone tokens spell them."""
    letters = final.replace("v", "ü") if final == "v" else final
    if tone not in (1, 2, 3, 4):
        return letters
    if "a" in letters:
        at = letters.index("a")
    elif "e" in letters:
        at = letters.index("e")
    elif "ou" in letters:
        at = letters.index("o")
    else:
        at = max(i for i, ch in enumerate(letters) if ch in "iouü")
    return letters[:at] + _TONE_MARKS[letters[at]][tone - 1] + letters[at + 1:]


# --- English ---------------------------------------------------------------------------------------


def _english(reading: str, word: str) -> Reading:
    if re.fullmatch(r"[A-Z0-9 ]+", reading):
        phones = tuple(_arpabet_phone(p, word) for p in reading.split())
        return Reading("en", " ".join(phones), phones=phones)
    ipa = reading.strip("/").strip()
    for ch in ipa:
        if ch not in IPA_SYMBOLS:
            raise ReadingError(about(word, f"the IPA symbol {ch!r} (U+{ord(ch):04X}) is not one the engines "
                                           "can read for English; write the reading in IPA (ˈnaɪs) or "
                                           "ARPAbet (N AY1 S)"),
                               code="reading_ipa_unknown", word=word, symbol=ch)
    phones = ipa_to_arpabet(ipa)
    if not phones:
        raise ReadingError(about(word, "the reading has no sounds"),
                           code="reading_empty", word=word)
    return Reading("en", f"/{ipa}/", phones=phones, ipa=ipa)


def _arpabet_phone(phone: str, word: str) -> str:
    match = _ARPABET_PHONE.fullmatch(phone)
    name = match.group(1) if match else phone
    if not match or (name not in ARPABET_VOWELS and name not in ARPABET_CONSONANTS) or \
            (name in ARPABET_CONSONANTS and match.group(2)):
        raise ReadingError(about(word, f"{phone!r} is not an ARPAbet phone (vowels take a stress "
                                       "digit: AY1; consonants none: N)"),
                           code="reading_arpabet_unknown", word=word, phone=phone)
    return phone


def ipa_to_arpabet(ipa: str) -> tuple[str, ...]:
    """ARPAbet phones of an English IPA reading (checked symbols): the vowel after ˈ gets stress 1,
    after ˌ stress 2, others 0 (a reading without ˈ stresses its first vowel, as a word of one
    syllable is); a syllabic consonant (n̩) gets a schwa (AH0) before it."""
    ipa = unicodedata.normalize("NFD", ipa).replace("\u0361", "").replace("\u035c", "")
    phones: list[str] = []
    stress = "0" if "ˈ" in ipa else "1"
    i = 0
    while i < len(ipa):
        ch = ipa[i]
        if ch in _STRESS:
            stress = _STRESS[ch]
            i += 1
            continue
        if ch in IPA_MARKS:
            if ch == "\u0329" and phones:  # syllabic: the consonant before it makes a syllable
                phones.insert(len(phones) - 1, "AH0")
            i += 1
            continue
        for symbol, phone in _IPA_TO_ARPABET:
            if ipa.startswith(symbol, i):
                if phone in ARPABET_VOWELS:
                    phone, stress = phone + stress, "0"
                phones.append(phone)
                i += len(symbol)
                break
        else:  # not reached for a checked reading
            i += 1
    return tuple(phones)


# --- Japanese --------------------------------------------------------------------------------------


def _japanese(reading: str, word: str) -> Reading:
    kana = reading.replace(" ", "").replace("\u3000", "")
    if not _KANA.fullmatch(kana):
        bad = next(ch for ch in kana if not _KANA.fullmatch(ch))
        raise ReadingError(about(word, f"a Japanese reading is written in kana only; {bad!r} is not kana"),
                           code="reading_kana_only", word=word, character=bad)
    return Reading("ja", kana, kana=kana)


def is_han(ch: str) -> bool:
    return bool(_HAN.fullmatch(ch))


def is_kana(ch: str) -> bool:
    return bool(_KANA.fullmatch(ch))
