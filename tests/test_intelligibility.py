"""Pronunciation scoring, the one-voice guard and its notes (cosyedge/listening/intelligibility.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cosyedge.listening import intelligibility
from cosyedge.errors import CancelledError
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


def test_check_voice_scores_each_language_from_what_the_listener_heard():
    spoken: list[tuple[str, str]] = []

    def speak(text, language):
        spoken.append((text, language))
        return np.zeros(16000, np.float32), 16000

    heard = {"zh": "请把课本翻到第二十五页，明天早上八点半集合。", "en": "Please take out your books.",
             "ja": "教科書の二十ページを開いてください。"}

    def transcribe(audio, rate, language):
        return SimpleNamespace(text=heard[language])

    rates = intelligibility.check_voice(speak, ("zh", "en", "ja"), transcribe=transcribe)
    assert [lang for _, lang in spoken] == ["zh", "en", "ja"]
    assert rates["zh"] == 0 and rates["ja"] == 0 and rates["en"] > 0.3
    assert intelligibility.badly_read(rates) == ["en"]


def test_check_voice_stops_when_cancelled():
    with pytest.raises(CancelledError):
        intelligibility.check_voice(lambda t, lang: (np.zeros(10, np.float32), 16000), ("zh",),
                                    transcribe=lambda *a: SimpleNamespace(text=""), cancelled=lambda: True)


def test_reading_notes_name_only_the_languages_the_text_uses():
    meta = {"reading_errors": {"zh": 0.4, "en": 0.02, "ja": 0.3}}
    notes = intelligibility.reading_notes(meta, ["zh", "en"])
    assert [n.code for n in notes] == ["voice_match_reads_badly"]
    assert notes[0].params == {"language": "zh", "error_rate": 0.4}
    assert "Chinese" in notes[0] and "40%" in notes[0]
    assert intelligibility.reading_notes({}, ["zh"]) == []
    analysis = SimpleNamespace(sentences=[SimpleNamespace(language="zh"), SimpleNamespace(language="en"),
                                          SimpleNamespace(language="zh")])
    assert intelligibility.text_languages(analysis) == ["en", "zh"]
    plain = SimpleNamespace(sentences=["Hello."], language="auto")
    assert intelligibility.text_languages(plain) == ["en", "ja", "zh"]
    assert intelligibility.text_languages(SimpleNamespace(sentences=["Hello."], language="ja")) == ["ja"]
