"""Clause and sentence splitting, and word-boundary cutting of long pieces."""

from cosyedge.text.split import script_words, split_clauses, split_words, whitespace_words


def summary(text):
    return [(c.text, c.mark, c.ends_sentence) for c in split_clauses(text)]


def test_chinese_punctuation_maps_to_kokoro_marks():
    assert summary("你好，世界！今天天气真好。真的？是、对；好：嗯") == [
        ("你好", ",", False), ("世界", "!", True), ("今天天气真好", ".", True), ("真的", "?", True),
        ("是", ",", False), ("对", ";", False), ("好", ":", False), ("嗯", "", False)]


def test_english_marks_ellipsis_and_repeated_marks():
    assert summary("Hello, world! How are you?? Fine... thanks.") == [
        ("Hello", ",", False), ("world", "!", True), ("How are you", "?", True), ("Fine", "…", False),
        ("thanks", ".", True)]


def test_strongest_mark_of_a_run_wins():
    assert summary("Really?! Yes!!! ok") == [("Really", "?", True), ("Yes", "!", True), ("ok", "", False)]


def test_decimal_point_does_not_split():
    assert summary("3.14 is pi.") == [("3.14 is pi", ".", True)]


def test_quotes_and_brackets_only_separate_words():
    assert summary("“他说：「好」”——然后（走了）…") == [
        ("他说", ":", False), ("好", "—", False), ("然后 走了", "…", False)]


def test_curly_apostrophe_becomes_ascii():
    assert summary("It’s ok") == [("It's ok", "", False)]


def test_line_breaks_end_sentences():
    assert summary("line one\nline two") == [("line one", ".", True), ("line two", "", False)]


def test_punctuation_only_gives_nothing():
    assert split_clauses("!!! 。。。 ，") == []


def test_sentence_marks_end_sentences():
    assert [c.ends_sentence for c in split_clauses("a, b. c! d")] == [False, True, True, False]


def test_split_words_respects_limit_and_boundaries():
    pieces = split_words("one two three four five", 9, whitespace_words)
    assert pieces == ["one two", "three", "four five"]
    assert all(len(p) <= 9 for p in pieces)


def test_split_words_cuts_inside_an_overlong_word_as_last_resort():
    assert split_words("abcdefghijklm no", 5, whitespace_words) == ["abcde", "fghij", "klm", "no"]


def test_split_words_short_text_and_blank():
    assert split_words("short", 10, whitespace_words) == ["short"]
    assert split_words("   ", 10, whitespace_words) == []


def test_tokenizers_keep_all_characters():
    text = "東京タワーはとても 高い"
    assert "".join(script_words(text)) == text
    assert script_words("東京タワーは") == ["東京", "タワー", "は"]
    assert "".join(whitespace_words(" a  b ")) == " a  b "
