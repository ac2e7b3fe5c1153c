"""Language segmentation: seed tags, script rules, neutral characters, langdetect."""

import pytest

from cosyedge.text.langid import (Run, Unread, char_class, detect_language, language_notes,
                                  parse_tags, segment)


def langs(text, language="auto"):
    return [(r.language, r.text.strip()) for r in segment(text, language)]


def test_char_classes():
    assert [char_class(c) for c in "中かカaé5,😀한"] == [
        "han", "kana", "kana", "latin", "latin", "digit", "neutral", "other", "other"]


def test_seed_tags_split_languages_and_start_blocks():
    runs = segment("[zh]今天天气真好[en]It's sunny today")
    assert runs == [Run("zh", "今天天气真好", False), Run("en", "It's sunny today", True)]


def test_tags_are_case_insensitive():
    assert langs("[ZH]你好[En]hello[jA]東京") == [("zh", "你好"), ("en", "hello"), ("ja", "東京")]


def test_ja_tag_makes_kanji_only_text_japanese():
    assert langs("東京大学") == [("zh", "東京大学")]
    assert langs("[ja]東京大学") == [("ja", "東京大学")]


def test_mul_tag_means_detect_and_closing_tag_returns_to_caller_language():
    text = "[zh]你好，世界！[en]How are you?[ja]こんにちは[mul]混合模式启动[/mul]東京"
    assert langs(text, "ja") == [("zh", "你好，世界！"), ("en", "How are you?"), ("ja", "こんにちは"),
                                 ("zh", "混合模式启动"), ("ja", "東京")]


def test_unsupported_tags_are_removed_not_read():
    assert langs("[ko]hello [yue]你好") == [("en", "hello"), ("zh", "你好")]


def test_unknown_bracket_text_is_left_alone():
    assert langs("[note] hi") == [("en", "[note] hi")]


def test_chinese_with_embedded_english_word():
    assert langs("我喜欢Python编程") == [("zh", "我喜欢"), ("en", "Python"), ("zh", "编程")]


def test_any_kana_makes_the_sentence_japanese():
    assert langs("こんにちは世界") == [("ja", "こんにちは世界")]
    # the rule is per sentence: a Chinese sentence next to a Japanese one stays Chinese
    assert langs("你好。東京です。") == [("zh", "你好。"), ("ja", "東京です。")]


def test_digits_glued_to_han_belong_to_han():
    assert langs("Python 3.11版本") == [("en", "Python"), ("zh", "3.11版本")]
    assert langs("I paid 5元 ok") == [("en", "I paid"), ("zh", "5元"), ("en", "ok")]


def test_digits_otherwise_join_the_run_before():
    assert langs("I have 3 apples, 你好") == [("en", "I have 3 apples,"), ("zh", "你好")]


def test_units_after_numbers_stay_with_the_number():
    assert langs("距离是100km。") == [("zh", "距离是100km。")]
    assert langs("It is 100 km away") == [("en", "It is 100 km away")]


def test_neutral_only_text_uses_tag_or_default():
    assert langs("123") == [("zh", "123")]
    assert langs("[en]123") == [("en", "123")]
    assert [(r.language) for r in segment("123", default="en")] == ["en"]


def test_emoji_and_unsupported_scripts_are_dropped():
    assert langs("hello 😀 world") == [("en", "hello   world")]
    assert segment("안녕하세요") == []


def test_detect_language_is_deterministic_and_uses_scripts_first():
    assert detect_language("こんにちは世界") == "ja"
    assert detect_language("今天天气真好") == "zh"
    assert detect_language("12345 !!") is None
    french = "Bonjour tout le monde, comment allez-vous aujourd'hui ?"
    assert [detect_language(french) for _ in range(5)] == ["fr"] * 5
    assert detect_language("The weather is lovely today and we are going out") == "en"


def test_parse_tags_yields_blocks_in_order():
    assert list(parse_tags("a[en]b[/en]c", "zh")) == [("zh", "a"), ("en", "b"), ("zh", "c")]


def test_other_languages_tags_are_markup_not_text():
    unread = Unread()
    assert [(r.language, r.text.strip()) for r in segment("[fr]Bonjour", unread=unread)] == \
        [("en", "Bonjour")]  # not "fr Bonjour"
    assert unread.tags == ["[fr]"]
    assert langs("[de-DE]Hallo [/de-DE]你好") == [("en", "Hallo"), ("zh", "你好")]
    # a region on our own languages still selects them
    assert langs("[en-US]Hello [zh-CN]你好") == [("en", "Hello"), ("zh", "你好")]


def test_bracketed_words_that_are_no_tag_stay_text():
    unread = Unread()
    assert langs("He said [it] was fine [sic].") == [("en", "He said [it] was fine [sic].")]
    segment("He said [it] was fine [sic] [xy].", unread=unread)
    assert unread.tags == [] and unread.notes() == []
    assert langs("[it-IT]Ciao") == [("en", "Ciao")]


def test_unread_calls_signs_symbols_and_keeps_quotes_short():
    unread = Unread()
    segment("x² + y² = ① and 5 µ", unread=unread)
    assert unread.notes() == ["4 symbols not read (², ①, µ)"]  # no language named: they are signs
    unread = Unread()
    segment("Hello there. " + "안녕하세요" * 60, unread=unread)
    (note,) = unread.notes()
    assert note.startswith("300 Hangul characters not read (") and len(note) < 120, note


def test_units_abbreviations_and_hyphenated_words_in_brackets_stay_text():
    for text in ("latency [ms] is low", "GET /users/[id] returns one", "[to-do] buy milk",
                 "a [no-go] area", "the [co-op] shop", "[no_reply] mail", "colour [UK]", "Henry [VI]",
                 "[NB] read this", "3 [kg] of rice", "an [en-dash] here", "[Hz] and [kW]"):
        unread = Unread()
        runs = segment(text, unread=unread)
        assert "".join(r.text for r in runs) == text, text  # nothing removed
        assert unread.tags == [], text
    # the forced language is kept around it (a tag would have switched to detection: zh for Han)
    assert "zh" not in {r.language for r in segment("漢字の[ms]漢字", "ja")}


def test_language_tags_with_regions_and_bare_common_codes():
    for tag in ("[fr]", "[FR]", "[de]", "[ko]", "[yue]", "[de-DE]", "[pt-BR]", "[it-IT]", "[es-419]",
                "[sr-Latn-RS]"):
        unread = Unread()
        runs = segment(f"{tag}Bonjour", unread=unread)
        assert "".join(r.text for r in runs).strip() == "Bonjour", tag
        assert unread.tags == [tag], tag
    assert langs("[zh-cn]你好[en-us]Hello[zh-Hant-TW]再見") == [("zh", "你好"), ("en", "Hello"),
                                                                ("zh", "再見")]


def test_unread_records_dropped_scripts_with_their_words():
    unread = Unread()
    segment("[ko]안녕하세요 class. Привет, мир! 😀", unread=unread)
    notes = unread.notes()
    assert notes[0].startswith("tag [ko] not read aloud")
    assert any(n.startswith("5 Hangul characters not read (안녕하세요)") for n in notes), notes
    assert any(n.startswith("9 Cyrillic characters not read (Привет, мир)") for n in notes), notes
    assert "1 emoji not read (😀)" in notes
    plain = Unread()
    segment("[zh]今天天气真好[en]It's 25°C today. 2024年", unread=plain)
    assert plain.notes() == []


@pytest.mark.parametrize("text, language, expected", [
    ("今天天气真好", "en", ["6 characters: read as Chinese"]),      # "English" over Chinese text
    ("Hello 今天", "zh", ["5 characters: read as English"]),
    ("今日はHello", "ja", ["5 characters: read as English"]),
    ("今天", "ja", []),                                                  # ja decides Chinese characters
    ("[zh]今天[en]hello", "en", []),                                      # the tags chose
    ("Hello 今天", "auto", []),
])
def test_language_notes_say_where_the_setting_was_not_applied(text, language, expected):
    notes = language_notes(text, language)
    assert len(notes) == len(expected)
    for note, part in zip(notes, expected):
        assert note.startswith(f"language {language} not applied to {part}")


@pytest.mark.parametrize("text, expected", [
    # a math variable in Chinese text: only the letter is English, the rest stays Chinese
    ("已知a=2，b=3", [("zh", "已知"), ("en", "a"), ("zh", "=2，"), ("en", "b"), ("zh", "=3")]),
    ("函数y=2x+1", [("zh", "函数"), ("en", "y"), ("zh", "=2"), ("en", "x"), ("zh", "+1")]),
    ("AB=5cm", [("en", "AB=5cm")]),                          # no Chinese around: English
    ("Let x = 5", [("en", "Let x = 5")]),
    ("我喜欢A。", [("zh", "我喜欢"), ("en", "A。")]),           # punctuation alone follows the letter
    ("我用Python 3写", [("zh", "我用"), ("en", "Python"), ("zh", "3写")]),  # a word is no variable
])
def test_symbols_after_a_math_variable_stay_in_the_sentences_language(text, expected):
    assert [(r.language, r.text.strip()) for r in segment(text)] == expected
