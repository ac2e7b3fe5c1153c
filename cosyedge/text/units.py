"""Units of measure written after numbers (``5 km``, ``25°C``), with their spoken forms.

Shared by language detection (a unit glued to a number is part of the number, not an English word:
"距离是100km" stays Chinese) and by the per-language normalizers.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Unit(NamedTuple):
    en_one: str
    en_many: str
    zh: str
    ja: str


UNITS: dict[str, Unit] = {
    "km/h": Unit("kilometer per hour", "kilometers per hour", "公里每小时", "キロメートル毎時"),
    "m/s": Unit("meter per second", "meters per second", "米每秒", "メートル毎秒"),
    "km²": Unit("square kilometer", "square kilometers", "平方公里", "平方キロメートル"),
    "m²": Unit("square meter", "square meters", "平方米", "平方メートル"),
    "cm²": Unit("square centimeter", "square centimeters", "平方厘米", "平方センチメートル"),
    "m³": Unit("cubic meter", "cubic meters", "立方米", "立方メートル"),
    "cm³": Unit("cubic centimeter", "cubic centimeters", "立方厘米", "立方センチメートル"),
    "km": Unit("kilometer", "kilometers", "公里", "キロメートル"),
    "cm": Unit("centimeter", "centimeters", "厘米", "センチメートル"),
    "mm": Unit("millimeter", "millimeters", "毫米", "ミリメートル"),
    "m": Unit("meter", "meters", "米", "メートル"),
    "kg": Unit("kilogram", "kilograms", "千克", "キログラム"),
    "mg": Unit("milligram", "milligrams", "毫克", "ミリグラム"),
    "g": Unit("gram", "grams", "克", "グラム"),
    "ml": Unit("milliliter", "milliliters", "毫升", "ミリリットル"),
    "mL": Unit("milliliter", "milliliters", "毫升", "ミリリットル"),
    "L": Unit("liter", "liters", "升", "リットル"),
    "kWh": Unit("kilowatt hour", "kilowatt hours", "千瓦时", "キロワット時"),
    "kW": Unit("kilowatt", "kilowatts", "千瓦", "キロワット"),
    "W": Unit("watt", "watts", "瓦", "ワット"),
    "V": Unit("volt", "volts", "伏", "ボルト"),
    "kHz": Unit("kilohertz", "kilohertz", "千赫兹", "キロヘルツ"),
    "MHz": Unit("megahertz", "megahertz", "兆赫兹", "メガヘルツ"),
    "GHz": Unit("gigahertz", "gigahertz", "吉赫兹", "ギガヘルツ"),
    "Hz": Unit("hertz", "hertz", "赫兹", "ヘルツ"),
    "KB": Unit("kilobyte", "kilobytes", "千字节", "キロバイト"),
    "MB": Unit("megabyte", "megabytes", "兆字节", "メガバイト"),
    "GB": Unit("gigabyte", "gigabytes", "吉字节", "ギガバイト"),
    "TB": Unit("terabyte", "terabytes", "太字节", "テラバイト"),
    "°C": Unit("degree Celsius", "degrees Celsius", "摄氏度", "度"),
    "°F": Unit("degree Fahrenheit", "degrees Fahrenheit", "华氏度", "華氏度"),
    "℃": Unit("degree Celsius", "degrees Celsius", "摄氏度", "度"),
    "℉": Unit("degree Fahrenheit", "degrees Fahrenheit", "华氏度", "華氏度"),
    "°": Unit("degree", "degrees", "度", "度"),
    "min": Unit("minute", "minutes", "分钟", "分"),
    "h": Unit("hour", "hours", "小时", "時間"),
}

NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"
# Longest names first so "km/h" wins over "km" and "kWh" over "kW"; a unit must end the word.
_NAMES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
UNIT_AFTER_NUMBER = re.compile(rf"({NUMBER}) ?({_NAMES})(?![A-Za-z])")
