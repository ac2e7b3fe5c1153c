"""Cleanup: control characters, width, whitespace."""

import pytest

from cosyedge.text.cleanup import clean, collapse_whitespace, strip_control, to_halfwidth


def test_fullwidth_letters_digits_symbols_are_narrowed():
    assert to_halfwidth("ＡＢＣ１２３％＄＆＋＠") == "ABC123%$&+@"


def test_cjk_punctuation_is_kept_fullwidth():
    assert to_halfwidth("你好，世界！真的？是：对；（好）") == "你好，世界！真的？是：对；（好）"


def test_fullwidth_currency_signs_are_narrowed():
    assert to_halfwidth("￥100￡5") == "¥100£5"


def test_halfwidth_katakana_is_widened():
    assert to_halfwidth("ｶﾞｷﾞ") == "ガギ"


def test_control_and_format_characters_are_dropped():
    assert strip_control("a\x00b\u200bc\ufeffd\u202ee") == "abcde"


def test_tabs_and_line_separators_become_space_or_newline():
    assert strip_control("a\tb\r\nc\u2028d") == "a b\n\nc\nd"


def test_whitespace_is_collapsed_and_trimmed():
    assert collapse_whitespace("  a \u3000 b \n\n  c  ") == "a b\nc"


def test_clean_of_only_controls_is_empty():
    assert clean("\x00\x01\u200b \t\n") == ""


@pytest.mark.parametrize("text, expected", [
    ("Tom &amp; Jerry&nbsp;are &#39;ok&#39;, AT&T", "Tom & Jerry are 'ok', AT&T"),  # pasted from a web page
    ("Cafe\u0301 re\u0301sume\u0301", "Café résumé"),                              # macOS: composed
    ("\ufb01le \ufb02ow", "file flow"),                                            # PDF ligatures
    ("请完成第Ⅱ卷的第Ⅲ题, Chapter Ⅳ", "请完成第2卷的第3题, Chapter 4"),             # numeral characters
    ("zero\u200bwidth\u200bspace 中\u200b文", "zero width space 中文"),
    ("x² + y³ = 2¹⁰, H₂O", "x^2 + y^3 = 2^10, H2O"),                                 # exponents, subscripts
    ("圆的面积是πr², π is 3.14", "圆的面积是派r^2, pi is 3.14"),
])
def test_pasted_forms_are_unified(text, expected):
    assert clean(text) == expected
