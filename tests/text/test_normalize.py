"""Normalization of numbers, dates, times, money, units and symbols in zh, en and ja."""

import pytest

from cosyedge.text.normalize import normalize
from cosyedge.text.normalize_en import cardinal, ordinal, year


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (40, "forty"), (99, "ninety-nine"), (100, "one hundred"),
    (1234, "one thousand two hundred thirty-four"), (1_000_001, "one million one"),
    (-7, "minus seven")])
def test_english_cardinals(n, words):
    assert cardinal(n) == words


def test_english_ordinals_and_years():
    assert [ordinal(n) for n in (1, 2, 3, 5, 12, 20, 21, 100)] == [
        "first", "second", "third", "fifth", "twelfth", "twentieth", "twenty-first", "one hundredth"]
    assert [year(y) for y in (1999, 2005, 2024, 1900, 1905)] == [
        "nineteen ninety-nine", "two thousand five", "twenty twenty-four", "nineteen hundred",
        "nineteen oh five"]


@pytest.mark.parametrize("text, expected", [
    ("I paid $12.50 for 3 books.", "I paid twelve dollars and fifty cents for three books."),
    ("It costs $1.5 million.", "It costs one point five million dollars."),
    ("50% of 1,234 people", "fifty percent of one thousand two hundred thirty-four people"),
    ("Meet at 9:05 pm or 10:00.", "Meet at nine oh five P M or ten o'clock."),
    ("Born 2024-01-15, 1/2/1999.",
     "Born January fifteenth, twenty twenty-four, January second, nineteen ninety-nine."),
    ("In 2024 we had 2024 apples.", "In twenty twenty-four we had two thousand twenty-four apples."),
    ("Dr. Smith of the U.S.A. is here", "Doctor Smith of the U S A is here"),
    ("It is 25°C and 1 km away.", "It is twenty-five degrees Celsius and one kilometer away."),
    ("the 1st and 22nd", "the first and twenty-second"),
    ("pages 10-20, -5 degrees", "pages ten to twenty, minus five degrees"),
    ("version 3.11.2 of example.com", "version three point eleven point two of example dot com"),
    ("A & B + C = D @ home #1", "A and B plus C equals D at home number one"),
    ("agent 007", "agent zero zero seven"),
    ("pi is 3.14", "pi is three point one four"),
    # classroom inputs
    ("Are you ready? No.", "Are you ready? No."),                  # not "number"
    ("No. 5 and No.6", "number five and number six"),
    ("It is -5°C, down -5%.", "It is minus five degrees Celsius, down minus five percent."),
    ("from 9:00-10:30, pages 3–5", "from nine o'clock to ten thirty, pages three to five"),
    ("5-3=2 and 7 - 2 = 5", "five minus three equals two and seven minus two equals five"),
    ("−5 and 7 − 2", "minus five and seven minus two"),          # U+2212 minus sign
    ("1/2 of 3/4, 2/3, 7/4 and 1 1/2 cups",
     "one half of three fourths, two thirds, seven fourths and one and one half cups"),
    ("open 24/7, 50/50, due 11/30, 1/100", "open twenty-four seven, fifty fifty, due eleven thirty, one hundredth"),
    ("20 m² and 1 cm³", "twenty square meters and one cubic centimeter"),
    ("CO2 and H2O, Q1, an MP3 in 4K", "CO two and H two O, Q one, an MP three in four K"),
    ("the 1990s, the 80s and the 1800s", "the nineteen nineties, the eighties and the eighteen hundreds"),
    ("the 2024-2025 school year", "the twenty twenty-four to twenty twenty-five school year"),
    ("45min, 1h 30min", "forty-five minutes, one hour thirty minutes"),
    ("Thanks~ 5~10 minutes, ~5 kids", "Thanks five to ten minutes, about five kids"),
    ("Rest for 30s, in her 30s, the 80s, 1s", "Rest for thirty seconds, in her thirties, the eighties, one second"),
    ("You got 85/100, In 2023 1/4 of us", "You got eighty-five out of a hundred, In twenty twenty-three one fourth of us"),
    ("x^2 + 10^3 = (a+b)^10", "x squared plus ten cubed equals (a plus b) to the power of ten"),
    ("Pens, paper, etc. Then we start, etc., etc.", "Pens, paper, et cetera. Then we start, et cetera, et cetera."),
    ("Main St. is near St. Louis. I.e. far. King Jr. was", "Main Street is near Saint Louis. That is far. King Junior was"),
    ("at 5pm or 11 a.m., not 5 a.m. Then home.", "at five P M or eleven A M, not five A M. Then home."),
])
def test_english(text, expected):
    assert normalize(text, "en") == expected


@pytest.mark.parametrize("text, expected", [
    ("2024年1月15日", "二零二四年一月十五日"),
    ("今天是2024-01-15，10:30开会", "今天是二零二四年一月十五日，十点三十分开会"),
    ("8:05出发", "八点零五分出发"),
    ("增长了50%，约3.5%", "增长了百分之五十，约百分之三点五"),
    ("温度是25°C，明天-3℃", "温度是二十五摄氏度，明天负三摄氏度"),
    ("共有1,234,567人", "共有一百二十三万四千五百六十七人"),
    ("电话13800138000", "电话幺三八零零幺三八零零零"),
    ("价格¥12.5，或$5", "价格十二点五元，或五美元"),
    ("距离100km，重1kg", "距离一百公里，重一千克"),
    ("第1名，1/2", "第一名，二分之一"),
    ("3-5天", "三到五天"),
    ("A&B", "A和B"),
    ("编号007", "编号零零七"),
    ("3.11版本", "三点一一版本"),
    ("100%", "百分之一百"),
    # classroom inputs: 两 for a counting 2
    ("我有2个苹果，下午2点开会", "我有两个苹果，下午两点开会"),
    ("2:05出发，跑2km，¥2，学了2年", "两点零五分出发，跑两公里，两元，学了两年"),
    ("第2个，2月2号，2年级，12个，2.5个，-2℃", "第二个，二月二号，二年级，十二个，二点五个，负二摄氏度"),
    ("上午9:00-10:30", "上午九点到十点三十分"),
    ("看3–5页", "看三到五页"),
    ("5-3=2", "五减三等于二"),
    ("温度−5°C", "温度负五摄氏度"),
    ("面积是20m²", "面积是二十平方米"),
    ("2024-2025学年，1500-2000元", "二零二四到二零二五学年，一千五百到二千元"),   # years only before 年/学年
    ("休息45min", "休息四十五分钟"),
    ("一支笔2.50元，共10.00元，¥25.50，¥2.00，长2.0米", "一支笔二点五元，共十元，二十五点五元，两元，长二点零米"),
    ("谢谢老师~好的～～，3~5页", "谢谢老师 好的  ，三到五页"),            # a tilde is a tone, or a range
    ("圆周率是3.14159265358979，3.14159265358，1.5.3节", "圆周率是三点一四一五九二六五三五八九七九，三点一四一五九二六五三五八，一点五点三节"),
    ("比例是1:2，比分2:1，下午3:15", "比例是一比二，比分二比一，下午三点十五分"),
    ("学号20240101，房间号302，3号楼", "学号二零二四零一零一，房间号三零二，三号楼"),
    ("2020年-2021年，比例尺1:1000", "二零二零年到二零二一年，比例尺一比一千"),
    ("x^2，2^10，a^3", "x的平方，二的十次方，a的立方"),
    ("1.读课文 2.写生字", "一、读课文；二、写生字"),          # list markers; "2.5元", "3.14" stay numbers
    ("作业：1.读课文；2.写生字。共2.5元，3.14", "作业：一、读课文；二、写生字。共二点五元，三点一四"),
])
def test_chinese(text, expected):
    assert normalize(text, "zh") == expected


@pytest.mark.parametrize("text, expected", [
    ("10:30に会いましょう", "10時30分に会いましょう"),
    ("2024-01-15です", "2024年1月15日です"),
    ("$5です", "5ドルです"),
    ("25°Cです", "25度です"),
    ("1,000円", "1000円"),
    ("3.14です", "3点一四です"),
    ("100kmです", "100キロメートルです"),
    ("-5度", "マイナス5度"),
    ("A&B", "AアンドB"),
    ("−3度", "マイナス3度"),
    ("20m²", "20平方メートル"),
    ("ありがとう~ 5~10分, x^2", "ありがとう  5から10分, xの2乗"),
])
def test_japanese(text, expected):
    assert normalize(text, "ja") == expected


def test_unknown_language_is_a_programming_error():
    with pytest.raises(ValueError):
        normalize("x", "fr")


@pytest.mark.parametrize("text, language, expected", [
    # a unit written with ² / ³ is read as a unit after cleanup too (cleanup turned "m²" into "m^2",
    # which each normalizer then read as an exponent: 二十米的平方, 20メートルの2乗)
    ("面积是20m²，体积是8cm³", "zh", "面积是二十平方米，体积是八立方厘米"),
    ("20m²の部屋", "ja", "20平方メートルの部屋"),
    ("20 m² and 1 cm³, but x² and 2x²", "en",
     "twenty square meters and one cubic centimeter, but x squared and two x squared"),
    ("圆的面积是πr²", "zh", "圆的面积是派r的平方"),
    # a tilde between a time or date word and the next one is still a range (it was silent)
    ("9点~10点，周一~周五，1月~3月，谢谢老师~", "zh", "九点到十点，周一到周五，一月到三月，谢谢老师 "),
    ("9時～17時、9:00～17:00、月～金、ありがとう～", "ja", "9時から17時、9時から17時、月から金、ありがとう "),
    # numbers after a day's 号 count, they are no room number; a thousands comma before a long decimal
    ("3月5号300人参加，学号20240101", "zh", "三月五号三百人参加，学号二零二四零一零一"),
    ("1,234.567米", "zh", "一千二百三十四点五六七米"),
])
def test_review_regressions(text, language, expected):
    from cosyedge.text.cleanup import clean

    assert normalize(clean(text), language) == expected


@pytest.mark.parametrize("text, expected", [
    ("I live on Main St. It is quiet.", "I live on Main Street. It is quiet."),   # was "Main Saint It is"
    ("We live at 5 Oak St. Then we walk.", "We live at five Oak Street. Then we walk."),
    ("Visit St. Paul. In St. Louis, we met St. Mary.", "Visit Saint Paul. In Saint Louis, we met Saint Mary."),
])
def test_street_that_ends_a_sentence(text, expected):
    assert normalize(text, "en") == expected
