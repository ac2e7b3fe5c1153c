"""cosyedge.lexicon.matching: the rules by which entries are found in a text, and the notes."""

from __future__ import annotations

import pytest

from cosyedge.errors import ReadingError
from cosyedge.lexicon.entries import make_entry
from cosyedge.lexicon.matching import Lexicon, ReadingReport, inline_marks, outside


def lexicon(*entries):
    return Lexicon([make_entry(*e) for e in entries])


def words(matches, text):
    return [text[m.start:m.end] for m in matches]


def test_the_longest_entry_wins_and_matches_never_overlap():
    lx = lexicon(("zh", "行", "xing2"), ("zh", "银行", "yin2 hang2"), ("zh", "银行业", "yin2 hang2 ye4"))
    text = "银行业的银行不行"
    found = lx.find(text, "zh")
    assert words(found, text) == ["银行业", "银行", "行"]
    assert [m.entry.reading.text for m in found] == ["yin2 hang2 ye4", "yin2 hang2", "xing2"]


def test_english_ignores_case_and_matches_whole_words_only():
    lx = lexicon(("en", "Nice", "niːs"), ("en", "New York", "N UW1 Y AO1 R K"))
    text = "NICE and nice, not Nicely or nice2; new york"
    assert words(lx.find(text, "en"), text) == ["NICE", "nice", "new york"]


def test_entries_of_one_language_are_not_found_as_another():
    lx = lexicon(("zh", "银行", "yin2 hang2"), ("ja", "銀行", "ぎんこう"))
    assert lx.find("银行", "ja") == [] and len(lx.find("银行", "zh")) == 1


def test_inline_marks_are_checked_and_may_be_full_width():
    text = "去{银行|yin2 hang2}看｛Nice｜/niːs/｝和{東京|とうきょう}, {not a mark}"
    marks = inline_marks(text)
    assert [(m.entry.language, m.entry.word) for m in marks] == [("zh", "银行"), ("en", "Nice"), ("ja", "東京")]
    assert text[marks[0].start:marks[0].end] == "{银行|yin2 hang2}"
    with pytest.raises(ReadingError) as caught:
        inline_marks("去{银行|yin2 hang9}")
    assert caught.value.code == "reading_tone_out_of_range" and caught.value.params["word"] == "银行"


def test_outside_drops_matches_that_overlap_taken_spans():
    lx = lexicon(("zh", "银行", "yin2 hang2"))
    found = lx.find("银行和银行", "zh")
    assert outside(found, found[:1]) == found[1:]


def test_the_report_names_applied_entries_and_each_one_not_applied():
    ok, other = make_entry("zh", "银行", "yin2 hang2"), make_entry("ja", "銀行", "ぎんこう")
    report = ReadingReport(engine="kokoro")
    report.apply(ok)
    report.apply(ok)
    report.apply(ok, inline=True)
    report.other_language(other, "Chinese")
    report.not_supported(make_entry("en", "Nice", "niːs"), "this engine takes no phonemes")
    notes = report.notes(Lexicon(problems=[]))
    assert [n.code for n in notes] == ["reading_applied", "reading_other_language", "reading_not_supported"]
    assert notes[0].params["entries"][0] == {"word": "银行", "reading": "yin2 hang2", "count": 2, "inline": False}
    assert "银行 -> yin2 hang2 (x2)" in notes[0]
