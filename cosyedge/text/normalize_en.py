"""English text normalization: numbers, dates, times, money, percentages, units and symbols as words.

Written out before phonemization so that the sentence splitter never sees the dots and commas inside
"3.14" or "1,000", and so that every run is read the same way whatever G2P follows. Rules chosen:

* Four-digit numbers 1100-1999 read as years ("nineteen ninety-nine"); 2000-2099 read as years only
  after "in/since/by/from/until/of/year" or inside a date; other numbers are cardinals.
* Numbers above 999,999,999,999,999 or with a leading zero ("007") are read digit by digit.
* Time "9:05 pm" -> "nine oh five P M"; "10:00" -> "ten o'clock".
* Dates: ISO "2024-01-15" and US "1/15/2024" -> "January fifteenth, twenty twenty-four".
* "5-3=2" -> "five minus three equals two"; other "3-5", "3–5", "9:00-10:30" are ranges ("to"); a
  range of two years 1100-2099 ("2024-2025") reads both as years.
* Decades "1990s", "the 80s", "in her 30s" -> "nineteen nineties", "eighties", "thirties"; any other
  "30s" is seconds; "5pm" -> "five P M".
* Exponents (x^2, x² after cleanup) -> "x squared", "cubed", "to the power of ten".
* Letters and digits written together are read apart: "CO2" -> "CO two", "MP3", "Q1", "4K".
* Other "a/b" of digits with b from 2 to 10 or 100 are fractions, as read in class: "1/2" -> "one half",
  "3/4" -> "three fourths", "7/4" -> "seven fourths", "1 1/2" -> "one and one half"; a larger b
  ("due 11/30", a date without its year) and an improper one from 20 up ("24/7", "50/50") stay two
  numbers.
"""

from __future__ import annotations

import logging
import re

from .units import NUMBER, UNIT_AFTER_NUMBER, UNITS

logger = logging.getLogger(__name__)

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", "")}
_ABBREVIATIONS = {"Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Dr.": "Doctor", "Prof.": "Professor",
                  "St.": "Saint", "Jr.": "Junior", "Sr.": "Senior", "vs.": "versus", "etc.": "et cetera",
                  "e.g.": "for example", "i.e.": "that is", "E.g.": "For example", "I.e.": "That is",
                  "approx.": "approximately"}
_MAY_END_SENTENCE = {"etc.", "Jr.", "Sr."}
_SENTENCE_GOES_ON = re.compile(r"\s*[a-z0-9,;:)]|\s*[.!?]")  # after "etc.": no full stop to keep
_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "#": " number ", "%": " percent ",
            "°": " degrees ", "×": " times ", "÷": " divided by ", "~": " ", "*": " ", "/": " ",
            "_": " ", "|": " ", "^": " ", "\\": " ", "<": " less than ", ">": " greater than ", "−": " minus ",
            "€": " euros ", "$": " dollars ", "£": " pounds ", "¥": " yen "}
# "am", "p.m.": the final dot is kept when a capital follows, as the full stop it also is.
_MERIDIEM = r"(?:[ap]\.m(?:\.(?!\s+(?-i:[A-Z])))?|[ap]m)(?![A-Za-z])"
_YEAR_CUE = re.compile(r"(?:\b(?:in|since|by|from|until|till|of|year|before|after|around)\s+)$", re.I)


def cardinal(n: int) -> str:
    """0 -> "zero", 1234 -> "one thousand two hundred thirty-four" (US style, no "and")."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n >= 10**15:
        return digits(str(n))
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, rest = divmod(n, 10)
        return _TENS[tens] + ("-" + _ONES[rest] if rest else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + (" " + cardinal(rest) if rest else "")
    for value, name in _SCALES:
        if n >= value:
            high, rest = divmod(n, value)
            return cardinal(high) + " " + name + (" " + cardinal(rest) if rest else "")
    raise AssertionError("unreachable")


def ordinal(n: int) -> str:
    """1 -> "first", 22 -> "twenty-second", 100 -> "one hundredth"."""
    words = cardinal(n)
    head, sep, last = words.rpartition("-") if "-" in words.split(" ")[-1] else words.rpartition(" ")
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def digits(text: str) -> str:
    """Read each digit: "007" -> "zero zero seven"."""
    return " ".join(_ONES[int(d)] for d in text if d.isdigit())


def year(n: int) -> str:
    """1999 -> "nineteen ninety-nine", 2005 -> "two thousand five", 2024 -> "twenty twenty-four"."""
    if 2000 <= n <= 2009 or n % 1000 == 0 or not 1000 <= n <= 9999:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return cardinal(high) + " hundred"
    return cardinal(high) + (" oh " + _ONES[low] if low < 10 else " " + cardinal(low))


def number(text: str) -> str:
    """A written number ("1,234.5", "007") as words."""
    text = text.replace(",", "")
    whole, _, frac = text.partition(".")
    if len(whole) > 1 and whole.startswith("0"):
        spoken = digits(whole)
    else:
        spoken = cardinal(int(whole)) if whole else "zero"
    if frac:
        spoken += " point " + digits(frac)
    return spoken


def _money(match: re.Match) -> str:
    one, many, cent_one, cent_many = _CURRENCY[match.group(1)]
    amount = match.group(2).replace(",", "")
    scale = match.group(3)
    whole, _, frac = amount.partition(".")
    if scale:
        return f"{number(amount)} {scale} {many}"
    spoken = f"{number(whole)} {one if whole == '1' else many}"
    if frac and cent_one and len(frac) == 2 and frac != "00":
        cents = int(frac)
        spoken += f" and {cardinal(cents)} {cent_one if cents == 1 else cent_many}"
    elif frac and frac.strip("0"):
        spoken = f"{number(amount)} {many}"
    return spoken


def _time(match: re.Match) -> str:
    hour, minute, second, meridiem = match.group(1), match.group(2), match.group(3), match.group(4)
    h, m = int(hour), int(minute)
    if m == 0 and not second:
        spoken = cardinal(h) + (" o'clock" if not meridiem else "")
    elif m < 10:
        spoken = f"{cardinal(h)} oh {_ONES[m]}"
    else:
        spoken = f"{cardinal(h)} {cardinal(m)}"
    if second:
        s = int(second)
        spoken += f" and {cardinal(s)} {'second' if s == 1 else 'seconds'}"
    if meridiem:
        spoken += " " + _spell_meridiem(meridiem)
    return spoken


def _spell_meridiem(text: str) -> str:
    """ "p.m." / "pm" -> "P M" (espeak spells capitals)."""
    return " ".join(text.replace(".", "").upper())


def _date(y: int, m: int, d: int) -> str | None:
    if not (1 <= m <= 12 and 1 <= d <= 31):
        return None
    return f"{_MONTHS[m - 1]} {ordinal(d)}, {year(y)}"


def _iso_date(match: re.Match) -> str:
    spoken = _date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    return spoken if spoken else match.group(0).replace("-", " ")


def _us_date(match: re.Match) -> str:
    spoken = _date(int(match.group(3)), int(match.group(1)), int(match.group(2)))
    return spoken if spoken else match.group(0).replace("/", " ")


def _fraction(match: re.Match) -> str:
    """"3/4" -> "three fourths", "1 1/2" -> "one and one half"; other digit slashes are left as written."""
    whole, top, bottom = match.group(1), int(match.group(2)), int(match.group(3))
    if bottom < 2 or (bottom > 10 and bottom != 100) or (top >= bottom and (whole or top >= 20)):
        return match.group(0)  # "24/7", "50/50" and dates without a year ("due 11/30") stay numbers
    if bottom == 100 and top > 1 and not whole:
        return f"{cardinal(top)} out of a hundred"  # a score: "85/100"
    name = {2: "half", 100: "hundredth"}.get(bottom) or ordinal(bottom)
    if top != 1:
        name = "halves" if bottom == 2 else name + "s"
    return (f"{number(whole)} and " if whole else "") + f"{cardinal(top)} {name}"


def _abbreviation(match: re.Match) -> str:
    """ "Dr." -> "Doctor"; the dot of an "etc." that ends a sentence stays, as its full stop."""
    short = match.group(0)
    ends = short in _MAY_END_SENTENCE and _SENTENCE_GOES_ON.match(match.string, match.end()) is None
    return _ABBREVIATIONS[short] + ("." if ends else "")


def _power(exponent: int) -> str:
    """ "^2" -> " squared", "^3" -> " cubed", "^10" -> " to the power of ten"."""
    return {2: " squared", 3: " cubed"}.get(exponent, f" to the power of {cardinal(exponent)}")


def _decade(text: str) -> str:
    """ "1990" (of "1990s") -> "nineteen nineties", "80" -> "eighties"."""
    spoken = year(int(text)) if len(text) == 4 else cardinal(int(text))
    return spoken[:-1] + "ies" if spoken.endswith("y") else spoken + "s"


def _unit(match: re.Match) -> str:
    unit = UNITS[match.group(2)]
    amount = match.group(1)
    return f"{number(amount)} {unit.en_one if amount == '1' else unit.en_many}"


def _plain_number(match: re.Match) -> str:
    text = match.group(0)
    if re.fullmatch(r"\d{4}", text):
        value = int(text)
        before = match.string[max(0, match.start() - 12):match.start()]  # longest cue + space
        if 1100 <= value <= 1999 or (2000 <= value <= 2099 and _YEAR_CUE.search(before)):
            return year(value)
    return number(text)


def normalize_en(text: str) -> str:
    """Spell out everything in an English run that espeak would read badly or we must split on."""
    # "on Main St. It is quiet": a street name inside a sentence, then a new sentence (keep its stop)
    text = re.sub(r"(\b(?:[a-z]+|\d+),? [A-Z][a-z]+ )St\.(?=\s+[A-Z])", r"\1Street.", text)
    text = re.sub(r"(?<![A-Za-z])St\.(?!\s+[A-Z])", "Street", text)  # "Main St." but "St. Louis"
    for short in _ABBREVIATIONS:
        text = re.sub(rf"(?<![A-Za-z]){re.escape(short)}", _abbreviation, text)
    text = re.sub(r"(?<=[A-Za-z0-9)])\s?\^\s?(\d+)", lambda m: _power(int(m.group(1))), text)  # x^2, 10³
    text = re.sub(r"\bNo\.(?=\s?\d)", "number ", text)  # "No. 5", but "Are you ready? No." is "no"
    # U.S.A. -> U S A (letters are then spelled by espeak); keeps the dots out of the splitter
    text = re.sub(r"\b(?![ap]\.m\.)(?:[A-Za-z]\.){2,}", lambda m: " ".join(m.group(0).replace(".", "")) + " ",
                  text)
    text = re.sub(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", _iso_date, text)
    text = re.sub(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b", _us_date, text)
    text = re.sub(r"(?<![\d/.,])(?:(?<!\d)(\d{1,2}) )?(\d{1,3})/(\d{1,3})(?![\d/]|\.\d)", _fraction, text)
    # before times, money and units, which would hide the digits: "9:00-10:30", "-5°C", "-5%"
    text = re.sub(r"(\d)\s?[-–−]\s?(?=\d+(?:\.\d+)?\s?=)", r"\1 minus ", text)  # 5-3=2
    text = re.sub(r"\b(1[1-9]\d\d|20\d\d)\s?[-–]\s?(1[1-9]\d\d|20\d\d)\b",
                  lambda m: f"{year(int(m.group(1)))} to {year(int(m.group(2)))}", text)  # 2024-2025
    text = re.sub(r"(\d)\s?[-–~]\s?(?=\d)", r"\1 to ", text)  # ranges: 10-20, 3–5, 5~10
    text = re.sub(r"(?<![A-Za-z])~\s?(?=\d)", " about ", text)  # "~5 min"; other tildes are silent
    text = re.sub(r"(?<![\w.])[-−](?=\d)", "minus ", text)
    text = re.sub(rf"\b(\d{{1,2}}):(\d{{2}})(?::(\d{{2}}))?(?:\s*({_MERIDIEM}))?", _time, text, flags=re.I)
    text = re.sub(rf"\b(\d{{1,2}})\s?({_MERIDIEM})",
                  lambda m: f"{cardinal(int(m.group(1)))} {_spell_meridiem(m.group(2))}", text, flags=re.I)  # 5pm
    text = re.sub(rf"([$€£¥])\s?({NUMBER})(?:\s?(thousand|million|billion|trillion)\b)?", _money, text)
    text = re.sub(rf"({NUMBER})\s?%", lambda m: number(m.group(1)) + " percent", text)
    text = UNIT_AFTER_NUMBER.sub(_unit, text)
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: ordinal(int(m.group(1))), text, flags=re.I)
    text = re.sub(r"\b(1[1-9]\d0|20\d0)'?s\b|'(\d0)s\b", lambda m: _decade(m.group(m.lastindex)), text)
    text = re.sub(r"\b((?:the|his|her|their|my|your|our|early|late|mid)[ -])(\d0)'?s\b",
                  lambda m: m.group(1) + _decade(m.group(2)), text)  # the 80s, in her 30s
    text = re.sub(r"\b(\d+)s\b", lambda m: number(m.group(1)) + (" second" if m.group(1) == "1" else " seconds"),
                  text)  # any other "30s": seconds ("rest for 30s")
    text = re.sub(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])", " ", text)  # CO2, MP3, 4K
    text = re.sub(r"(?<=[A-Za-z])\.(?=[A-Za-z0-9])|(?<=\d)\.(?=[A-Za-z])", " dot ", text)  # example.com
    text = re.sub(r"\d+(?:\.\d+){2,}", lambda m: " point ".join(number(p) for p in m.group(0).split(".")),
                  text)  # version numbers 3.11.2
    text = re.sub(NUMBER, _plain_number, text)
    text = "".join(_SYMBOLS.get(ch, ch) for ch in text)
    return re.sub(r" {2,}", " ", text).strip()
