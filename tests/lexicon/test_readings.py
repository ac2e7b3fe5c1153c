"""cosyedge.lexicon.readings and entries: a reading is checked and parsed; every bad one is refused
with a code and the entry's word."""

from __future__ import annotations

import pytest

from cosyedge.errors import ReadingError
from cosyedge.lexicon.entries import guess_language, make_entry
from cosyedge.lexicon.readings import MAX_READING_CHARS, MAX_WORD_CHARS, initial_final, marked_final


@pytest.mark.parametrize("reading", ["yin2 hang2", "yín háng", "YIN2 HANG2", "yin2  hang2"])
def test_mandarin_readings_in_numbers_or_marks_give_numbered_syllables(reading):
    assert make_entry("zh", "银行", reading).reading.syllables == ("yin2", "hang2")


def test_mandarin_neutral_tone_and_u_umlaut_spellings():
    assert make_entry("zh", "绿", "lü4").reading.syllables == ("lv4",)
    assert make_entry("zh", "绿", "lv4").reading.syllables == ("lv4",)
    assert make_entry("zh", "的", "de0").reading.syllables == ("de5",)
    assert make_entry("zh", "妈妈", "mā ma").reading.syllables == ("ma1", "ma5")
    assert make_entry("zh", "去", "qü4").reading.syllables == ("qu4",)  # ü after q is written u


def test_english_ipa_and_arpabet_become_arpabet_phones():
    ipa = make_entry("en", "Nice", "/ˈniːs/").reading
    assert ipa.phones == ("N", "IY1", "S") and ipa.ipa == "ˈniːs" and ipa.text == "/ˈniːs/"
    assert make_entry("en", "Nice", "niːs").reading.phones == ("N", "IY1", "S")  # one syllable: stressed
    assert make_entry("en", "Nice", "N IY1 S").reading.phones == ("N", "IY1", "S")
    assert make_entry("en", "button", "ˈbʌtn̩").reading.phones == ("B", "AH1", "T", "AH0", "N")
    assert make_entry("en", "Siobhan", "ʃɪˈvɔːn").reading.phones == ("SH", "IH0", "V", "AO1", "N")


def test_japanese_kana_and_the_inline_language_guess():
    assert make_entry("ja", "東京", "とうきょう").reading.kana == "とうきょう"
    assert guess_language("銀行", "ぎんこう") == "ja"
    assert guess_language("银行", "yin2 hang2") == "zh"
    assert guess_language("Nice", "/niːs/") == "en"


@pytest.mark.parametrize("language, word, reading, code, param", [
    ("zh", "银行", "yin2 xang2", "reading_pinyin_unknown", ("syllable", "xang2")),
    ("zh", "银行", "yin2 hang6", "reading_tone_out_of_range", ("syllable", "hang6")),
    ("zh", "银行", "yin2 hang", "reading_tone_missing", ("syllable", "hang")),
    ("zh", "银行", "yin hang", "reading_tone_missing", ("reading", "yin hang")),
    ("zh", "银行", "yin2", "reading_syllable_count", ("characters", 2)),
    ("en", "Nice", "/niːsq/", "reading_ipa_unknown", ("symbol", "q")),
    ("en", "Nice", "N IY7 S", "reading_arpabet_unknown", ("phone", "IY7")),
    ("en", "Nice", "niːs.", "reading_punctuation", ("mark", ".")),
    ("zh", "银行", "yin2。hang2", "reading_punctuation", ("mark", "。")),
    ("zh", "银\u200b行", "yin2 hang2", "reading_control_chars", ("character", "U+200B")),
    ("zh", "银行", "yin2\x07 hang2", "reading_control_chars", ("character", "U+0007")),
    ("zh", "  ", "yin2", "reading_word_empty", None),
    ("zh", "银行", "", "reading_empty", None),
    ("zh", "行" * (MAX_WORD_CHARS + 1), "hang2", "reading_word_too_long", ("limit", MAX_WORD_CHARS)),
    ("en", "Nice", "n" * (MAX_READING_CHARS + 1), "reading_too_long", ("limit", MAX_READING_CHARS)),
    ("zh", "Nice", "ni3", "reading_word_script", ("language", "zh")),
    ("ja", "東京", "tokyo", "reading_kana_only", ("character", "t")),
    ("fr", "Nice", "nis", "reading_language_unknown", ("language", "fr")),
])
def test_bad_entries_are_refused_with_a_code_naming_the_word(language, word, reading, code, param):
    with pytest.raises(ReadingError) as caught:
        make_entry(language, word, reading)
    error = caught.value
    assert error.code == code and error.http_status == 400
    if word.strip():  # the message and the params name the entry
        assert error.params["word"] and repr(error.params["word"]) in error.message
    if param is not None:
        assert error.params[param[0]] == param[1]


def test_full_width_words_are_folded_like_text():
    assert make_entry("en", "Ｎｉｃｅ", "niːs").word == "Nice"


@pytest.mark.parametrize("syllable, tokens", [
    ("hang2", ("h", "áng")), ("yin2", ("y", "ín")), ("ji3", ("j", "ǐ")), ("ai4", ("", "ài")),
    ("lv4", ("l", "ǜ")), ("lve4", ("l", "vè")), ("liu2", ("l", "iú")), ("gui4", ("g", "uì")),
    ("zhong1", ("zh", "ōng")), ("de5", ("d", "e")), ("xiong2", ("x", "ióng")),
])
def test_pinyin_splits_into_initial_and_marked_final(syllable, tokens):
    initial, final, tone = initial_final(syllable)
    assert (initial, marked_final(final, tone)) == tokens
