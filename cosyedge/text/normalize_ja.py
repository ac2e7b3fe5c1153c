"""Japanese text normalization: only what pyopenjtalk reads wrongly on its own.

pyopenjtalk reads plain numbers, 年月日, 時分, 円 and ％ well, but drops or misreads "10:30",
"2024-01-15", "$5", "25°C", "1,000", "3.14" and symbols such as & and @. Those are rewritten into
forms it reads (10時30分, 2024年1月15日, 5ドル, 25度, 1000, 三点一四, アンド, アット).
"""

from __future__ import annotations

import re

from .units import NUMBER, UNIT_AFTER_NUMBER, UNITS

_KANJI_DIGITS = "〇一二三四五六七八九"
_CURRENCY = {"$": "ドル", "€": "ユーロ", "£": "ポンド", "¥": "円"}
_SYMBOLS = {"&": "アンド", "+": "プラス", "=": "イコール", "@": "アット", "#": "番号", "%": "パーセント",
            "°": "度", "×": "かける", "÷": "わる", "~": " ", "～": " ", "*": " ", "/": " ", "_": " ", "|": " ",
            "^": " ", "\\": " ", "<": " ", ">": " ", "$": "ドル", "€": "ユーロ", "£": "ポンド", "¥": "円"}


def _decimal(match: re.Match) -> str:
    whole, frac = match.group(1), match.group(2)
    return whole + "点" + "".join(_KANJI_DIGITS[int(d)] for d in frac)


def _date(match: re.Match) -> str:
    y, m, d = match.group(1), int(match.group(2)), int(match.group(3))
    return f"{y}年{m}月{d}日" if 1 <= m <= 12 and 1 <= d <= 31 else match.group(0)


def _time(match: re.Match) -> str:
    h, m = int(match.group(1)), int(match.group(2))
    if h > 24 or m > 59:
        return match.group(0)
    return f"{h}時" + (f"{m}分" if m else "")


def normalize_ja(text: str) -> str:
    """Rewrite the forms listed in the module docstring; leave the rest to pyopenjtalk."""
    text = re.sub(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d.])", _date, text)
    # 5~10, 9:00～17:00 (before times hide the digits), 9時～17時, 月～金; "ありがとう~" is a tone, silent
    text = re.sub(r"(?<=[\d時分秒日月年曜])\s?[~～]\s?(?=[\d月火水木金土日])", "から", text)
    text = re.sub(r"(?<!\d)(\d{1,2})[:：](\d{2})(?!\d)", _time, text)
    text = re.sub(r"\d{1,3}(?:,\d{3})+", lambda m: m.group(0).replace(",", ""), text)
    text = re.sub(r"\s?\^\s?(\d+)", r"の\1乗", text)  # x^2, x² (cleanup) -> xの2乗
    text = re.sub(rf"([$€£¥])\s?({NUMBER})", lambda m: m.group(2) + _CURRENCY[m.group(1)], text)
    text = UNIT_AFTER_NUMBER.sub(lambda m: m.group(1) + UNITS[m.group(2)].ja, text)
    text = re.sub(r"(?<![0-9A-Za-z.])[-−](?=\d)", "マイナス", text)
    text = re.sub(r"(\d+)\.(\d+)", _decimal, text)
    return "".join(_SYMBOLS.get(ch, ch) for ch in text)
