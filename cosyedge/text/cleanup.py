"""Language-independent text cleanup: pasted forms (entities, accents, ligatures, numerals), control
characters, character width, whitespace.

This is the first step for every input. It never raises: characters it cannot use are removed (or
turned into spaces) so that later steps only see printable text and ``\\n`` paragraph breaks.
"""

from __future__ import annotations

import html
import logging
import re
import unicodedata

from .units import UNITS

logger = logging.getLogger(__name__)

# Full-width punctuation that belongs to CJK typography and is kept as is (the splitter and the
# G2P punctuation map understand both forms); every other full-width ASCII form is narrowed.
_KEEP_FULLWIDTH = set("，！？：；（）．～")

_HALFWIDTH_KANA = re.compile(r"[\uff61-\uff9f]+")
_SPACES = re.compile(r"[ \t\u00a0\u3000\u2000-\u200a\u202f\u205f]+")
_NEWLINES = re.compile(r"\s*\n\s*")


def to_halfwidth(text: str) -> str:
    """Narrow full-width letters, digits and symbols (Ａ１％＄ -> A1%$); keep CJK punctuation.

    Half-width katakana is widened instead (ｶﾞ -> ガ), because the Japanese G2P expects the
    ordinary form.
    """
    out = []
    for ch in text:
        code = ord(ch)
        if 0xFF01 <= code <= 0xFF5E and ch not in _KEEP_FULLWIDTH:
            out.append(chr(code - 0xFEE0))
        elif ch in "￥￡￠":
            out.append(unicodedata.normalize("NFKC", ch))
        else:
            out.append(ch)
    text = "".join(out)
    return _HALFWIDTH_KANA.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def strip_control(text: str) -> str:
    """Drop control and format characters (zero-width joiners, BOM, bidi marks, NUL ...).

    Tabs, carriage returns and other line separators become spaces or ``\\n`` so that words on
    either side stay apart.
    """
    out = []
    dropped = 0
    for ch in text:
        if ch == "\n":
            out.append(ch)
        elif ch in "\r\u2028\u2029\x0b\x0c\x85":
            out.append("\n")
        elif ch == "\t":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            dropped += 1
        else:
            out.append(ch)
    if dropped:
        logger.debug("dropped %d control/format characters", dropped)
    return "".join(out)


def collapse_whitespace(text: str) -> str:
    """One space for any run of spaces, one ``\\n`` for any run of line breaks; trimmed."""
    text = _SPACES.sub(" ", text)
    text = _NEWLINES.sub("\n", text)
    return text.strip()


_ENTITY = re.compile(r"&(?:[A-Za-z]{2,8}|#\d{1,6}|#[xX][0-9A-Fa-f]{1,6});")
_LIGATURES = re.compile("[\ufb00-\ufb06]")  # ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ from PDFs
_ROMAN = re.compile("[\u2160-\u217f]")  # Ⅰ Ⅱ Ⅻ ⅰ ...: one character per numeral
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
_SUBSCRIPTS = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")
_HAN = "\u4e00-\u9fff"
# "20m²", "8 cm³": a unit written with its power (units.UNITS) keeps it, to be read as a unit
_POWER_UNIT = re.compile(r"\d ?(%s)$" % "|".join(
    sorted({re.escape(name[:-1]) for name in UNITS if name[-1] in "²³"}, key=len, reverse=True)))


def _superscript(match: re.Match) -> str:
    """Superscript digits as an exponent ("x²" -> "x^2"), except the power of a unit after a number
    ("20m²", "8 cm³"), which the normalizers read as a unit (平方米, square meters)."""
    unit = _POWER_UNIT.search(match.string, max(0, match.start() - 8), match.start())
    if unit and unit.group(1) + match.group() in UNITS:
        return match.group()
    return "^" + match.group().translate(_SUPERSCRIPTS)


def unify(text: str) -> str:
    """Text pasted from web pages, PDFs and macOS: HTML entities decoded (&amp; -> &), accents
    composed (e + U+0301 -> é, or the letter reads differently), ligatures split (ﬁ -> fi, else
    dropped), numeral characters as digits (第Ⅱ卷 -> 第2卷), superscript digits as an exponent
    (x² -> x^2; the power of a unit after a number, 20m², stays) and subscripts as digits (H₂O ->
    H2O), π as 派 beside Chinese text else "pi", a zero-width space between letters as a space (it
    separates words there; elsewhere it is dropped with the other format marks)."""
    if "&" in text:
        text = _ENTITY.sub(lambda m: html.unescape(m.group()), text)
    text = unicodedata.normalize("NFC", text)
    text = _LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    text = _ROMAN.sub(lambda m: str(int(unicodedata.numeric(m.group()))), text)
    # exponents as "^2" (each language's normalizer says "squared" / "的平方"), subscripts as digits
    text = re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹]+", _superscript, text)
    text = text.translate(_SUBSCRIPTS)
    # π: 派 beside Chinese characters (as read in class there), else "pi"
    text = re.sub(f"(?<=[{_HAN}])π|π(?=[A-Za-z^]*[{_HAN}])", "派", text).replace("π", " pi ")
    return re.sub(r"(?<=[A-Za-z])\u200b(?=[A-Za-z])", " ", text)


def clean(text: str) -> str:
    """All of the above, in the order that keeps the result stable."""
    return collapse_whitespace(to_halfwidth(strip_control(unify(text))))
