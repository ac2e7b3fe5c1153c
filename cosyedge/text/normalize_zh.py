"""Chinese text normalization: numbers and symbols written out in Han characters.

cn2an (``transform(..., "an2cn")``) does the core: integers, decimals, percentages, fractions, negative
numbers, "2024年" read digit by digit, ℃. Before it, this module rewrites what cn2an reads wrongly:

* dates "2024-01-15", "2024/1/15", "2024.1.15" -> 2024年1月15日; times "10:30" -> 十点三十分
* thousands separators (1,000,000), money (¥12.5, $5, €3, £2), units (100km -> 一百公里), °C/°F/°
* phone numbers (11-digit mobile, 0-prefixed landline) read digit by digit with 幺 for 1; any other run of
  more than 12 digits or with a leading zero is read digit by digit with 一
* symbols % & + = @ # ~ × ÷ -> 百分之, 和, 加, 等于, 艾特, 井号, 到/约, 乘, 除以
* sums of money lose their trailing zero decimals: "25.50元", "¥25.50" -> 二十五点五元, "10.00元" -> 十元
* numbers after 号 (学号, 编号, 房间号) read digit by digit; ratios "比例1:2", "2:1" -> 一比二, 二比一;
  3+ decimals digit by digit after 点 (3.14159 -> 三点一四一五九), "1.5.3节" -> 一点五点三节
* exponents x^2 (x² after cleanup) -> x的平方, 的立方, 2^10 -> 二的十次方
* list markers: "1.读课文 2.写生字" -> 一、读课文；二、写生字 (a space before a marker is a clause break)
* "2024-2025学年" (two years before 年, 学年, 学期, 届) -> 二零二四到二零二五学年
* digits "5-3=2" -> 五减三等于二; other "3-5", "3–5", "9:00-10:30" are ranges (到); − (U+2212) is 负 / 减
* a lone 2 that counts is 两: before a measure word (2个 -> 两个, 2小时, 2年 but 2年级), an hour (2点,
  2:05 -> 两点零五分) or a unit (2km -> 两公里, not 2℃); 第2, 12, 2.5, 2月, 2号 keep 二
"""

from __future__ import annotations

import logging
import re

from .units import NUMBER, UNIT_AFTER_NUMBER, UNITS

logger = logging.getLogger(__name__)

_DIGITS = "零一二三四五六七八九"
_CURRENCY = {"¥": "元", "$": "美元", "€": "欧元", "£": "英镑"}
_SYMBOLS = {"&": "和", "+": "加", "=": "等于", "@": "艾特", "#": "井号", "×": "乘", "÷": "除以",
            "°": "度", "%": "百分号", "*": " ", "/": " ", "_": " ", "|": " ", "^": " ", "\\": " ",
            "<": "小于", ">": "大于", "$": "美元", "€": "欧元", "£": "英镑", "¥": "元", "~": " ",
            "～": " ", "−": "减"}  # a tilde between numbers is a range (到, above); "谢谢老师~" is a tone
# Measure words after which a lone 2 is read 两 (counting), not 二 (naming: 2月, 2号, 2班, 2楼).
_LIANG = re.compile(r"(?<![\d.第])2(?![\d.])(?=\s?(?:[个位只本支张条件块元角次天周岁倍辆杯瓶把台棵朵双对"
                    r"匹头节道种遍份碗斤口根片座间所家项套篇首架颗粒点秒]|小时|分钟|年(?!级)))")


def digits(text: str, one: str = "一") -> str:
    """Read digits one by one: "0101" -> "零一零一"."""
    return "".join(one if d == "1" else _DIGITS[int(d)] for d in text if d.isdigit())


def number(text: str) -> str:
    """A written number ("1,234.5", "-3") as Chinese numerals."""
    import cn2an

    text = text.replace(",", "")
    negative = text.startswith("-")
    text = text.lstrip("-")
    whole, _, frac = text.partition(".")
    if len(whole) > 12 or (len(whole) > 1 and whole.startswith("0")):
        spoken = digits(whole)
    else:
        spoken = cn2an.an2cn(whole or "0")
    if frac:
        spoken += "点" + digits(frac)
    return ("负" if negative else "") + spoken


def _date(match: re.Match) -> str:
    y, m, d = match.group(1), int(match.group(2)), int(match.group(3))
    if not (1 <= m <= 12 and 1 <= d <= 31):
        return match.group(0)
    return f"{digits(y)}年{number(str(m))}月{number(str(d))}日"


def _count(text: str) -> str:
    """A number that counts something: "2" -> "两", others as :func:`number`."""
    return "两" if text == "2" else number(text)


def _time(match: re.Match) -> str:
    h, m, s = int(match.group(1)), int(match.group(2)), match.group(3)
    if h > 24 or m > 59:
        return match.group(0)
    spoken = _count(str(h)) + "点"
    if m or s:
        spoken += ("零" if m < 10 else "") + number(str(m)) + "分"
    if s and int(s):
        spoken += number(str(int(s))) + "秒"
    return spoken


def _money(match: re.Match) -> str:
    return _count(_amount(match.group(2))) + _CURRENCY[match.group(1)]


def _amount(text: str) -> str:
    """A sum of money without its trailing zero decimals: "25.50" -> "25.5", "10.00" -> "10"."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def _unit(match: re.Match) -> str:
    unit = UNITS[match.group(2)].zh
    return (number(match.group(1)) if unit.endswith("度") else _count(match.group(1))) + unit


def normalize_zh(text: str) -> str:
    """Rewrite digits and symbols of a Chinese run as Han characters."""
    import cn2an

    text = re.sub(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d.])", _date, text)
    text = re.sub(r"\s?\^\s?(\d+)", lambda m: {"2": "的平方", "3": "的立方"}.get(
        m.group(1), f"的{number(m.group(1))}次方"), text)  # x^2, r² (cleanup), 2^10
    # list markers "1.读课文 2.写生字": the number is read with a pause (一、), and a space before a
    # marker is a clause break, so "二" does not end the item before it
    text = re.sub(r"(?:^|(?<=[\s。；：！？]))(\d{1,2})[.．](?=[\u4e00-\u9fff])", r"\1、", text)
    text = re.sub(r"(?<=[\u4e00-\u9fff])[ \t]+(?=\d{1,2}、[\u4e00-\u9fff])", "；", text)
    text = re.sub(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d.])",
                  lambda m: "点".join(number(p) for p in m.group(0).split(".")), text)  # 1.5.3节
    text = re.sub(r"(?<![\d.,])(\d+)\.(\d{3,})(?![\d.])",
                  lambda m: number(m.group(1)) + "点" + digits(m.group(2)), text)  # 3.14159265358979
    text = re.sub(r"(?<=[比例分数尺])(\d+):(\d+)(?!\d)|(?<!\d)(\d+):(\d)(?!\d)",
                  lambda m: "比".join(number(g) for g in m.groups() if g), text)  # 比例1:2, 2:1
    text = re.sub(r"(?<=号)(?<!\d号)\s?(\d{3,})(?![\d.])", lambda m: digits(m.group(1)), text)  # 学号20240101
    text = re.sub(r"(?<![\d.])(1[3-9]\d{9}|0\d{2,3}-?\d{7,8})(?!\d)",
                  lambda m: digits(m.group(1), one="幺"), text)
    text = re.sub(r"(\d)\s?[-–−]\s?(?=\d+(?:\.\d+)?\s?=)", r"\1减", text)  # 5-3=2
    text = re.sub(r"(?<!\d)(1[1-9]\d\d|20\d\d)\s?[-–~～]\s?(1[1-9]\d\d|20\d\d)(?=\s?(?:学?年|学期|届))",
                  lambda m: digits(m.group(1)) + "到" + digits(m.group(2)), text)  # 2024-2025学年
    text = re.sub(r"(\d)\s?[-–~～]\s?(?=\d)", r"\1到", text)  # ranges: 3-5天, 9:00-10:30
    text = re.sub(r"(?<=[年月日号])\s?[-–]\s?(?=\d)", "到", text)  # 2020年-2021年 (was 年负二零二一年)
    text = re.sub(r"(?<=[\d一二三四五六七八九十点时分秒日月年号周天])\s?[~～]\s?(?=[\d一二三四五六七八九十周星])",
                  "到", text)  # 9点~10点, 周一~周五, 1月~3月 (a tilde after other words is a tone)
    text = re.sub(r"(?<!\d)(\d{1,2})[:：](\d{2})(?:[:：](\d{2}))?(?!\d)", _time, text)
    text = re.sub(r"\d{1,3}(?:,\d{3})+", lambda m: m.group(0).replace(",", ""), text)
    text = re.sub(r"(?<![0-9A-Za-z.])[-−](?=\d)", "负", text)
    text = re.sub(rf"([¥$€£])\s?({NUMBER})", _money, text)
    text = UNIT_AFTER_NUMBER.sub(_unit, text)
    text = re.sub(r"(\d+\.\d+)(?=\s?[元块])", lambda m: _amount(m.group(1)), text)  # 25.50元
    text = _LIANG.sub("两", text)
    text = re.sub(r"\d{13,}|(?<![\d.])0\d+", lambda m: digits(m.group(0)), text)
    try:
        text = cn2an.transform(text, "an2cn")
    except Exception as exc:  # cn2an raises plain ValueError/others on odd input; never fatal
        logger.debug("cn2an could not transform %r: %s", text[:80], exc)
    text = re.sub(r"\d+(?:\.\d+)?", lambda m: number(m.group(0)), text)  # whatever cn2an left
    return "".join(_SYMBOLS.get(ch, ch) for ch in text)
