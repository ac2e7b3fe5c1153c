"""Language-independent text cleanup: control characters, character width, whitespace.

This is the first step for every input. It never raises: characters it cannot use are removed (or
turned into spaces) so that later steps only see printable text and ``\\n`` paragraph breaks.
"""

from __future__ import annotations

import logging
import re
import unicodedata

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


def clean(text: str) -> str:
    """All of the above, in the order that keeps the result stable."""
    return collapse_whitespace(to_halfwidth(strip_control(text)))
