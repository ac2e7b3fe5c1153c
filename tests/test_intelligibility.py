"""Pronunciation scoring (cosyedge/listening/intelligibility.py)."""

from __future__ import annotations

import pytest

from cosyedge.listening.intelligibility import Score, edit_distance, pronunciation, score


def test_chinese_is_scored_in_toned_syllables_whatever_the_script_and_numerals():
    said = "今天是2024年3月15日，我们学习第三课。"
    assert score(said, "今天是二零二四年三月十五日我們學習第三課", "zh") == Score(0, len(pronunciation(said, "zh")))
    assert pronunciation("我们学习", "zh") == ["wo3", "men5", "xue2", "xi2"]
    # a wrong tone is an error: 考 kao3 heard as 靠 kao4
    assert score("我们要考数学", "我们要靠数学", "zh") == Score(1, 6)


def test_sandhi_characters_are_scored_without_tone_and_english_inside_chinese_not_at_all():
    assert pronunciation("一个月", "zh") == ["yi", "ge4", "yue4"]
    assert score("一个月", "一個月", "zh").errors == 0
    assert pronunciation("单词apple和banana", "zh") == ["dan1", "ci2", "he2"]


def test_japanese_is_scored_in_kana_readings():
    assert score("今日は三月十五日です。", "今日は3月15日です", "ja").errors == 0
    assert score("春になると、桜の花が咲きます。", "春になると桜の花が咲きます", "ja").errors == 0
    assert score("試験は午前九時に始まります。", "試験は午後九時に始まります。", "ja").errors > 0


def test_english_is_scored_in_words_with_numbers_read_out():
    assert score("The school trip starts at 8:30 in the morning.", "The school trip starts at 8.30 in the morning",
                 "en") == Score(0, 10)
    assert score("There are 28 students.", "there are twenty-eight students", "en").errors == 0
    assert score("Raise your hand.", "Raise your head.", "en") == Score(1, 3)


def test_edit_distance_counts_substitutions_insertions_and_deletions():
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("abc", "axc") == 1
    assert edit_distance("abc", "abxc") == 1
    assert edit_distance("abc", "") == 3
    assert Score(1, 4).rate == 0.25 and (Score(1, 4) + Score(1, 6)).rate == 0.2
