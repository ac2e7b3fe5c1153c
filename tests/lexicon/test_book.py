"""cosyedge.lexicon.book: the dictionary file (TSV, atomic), its import/export, and a damaged file
that is reported, skipped and kept whole."""

from __future__ import annotations

import pytest

from cosyedge.errors import NotFoundError, PayloadTooLargeError, ReadingError
from cosyedge.lexicon import book as book_module
from cosyedge.lexicon.book import PronunciationBook, parse_tsv


def test_entries_are_added_replaced_deleted_and_kept_as_readable_tsv(tmp_path):
    book = PronunciationBook(tmp_path / "pronunciations.tsv")
    assert book.add("zh", "银行", "yin2 hang2") == (book.entries()[0], False)
    _, replaced = book.add("zh", "银行", "yín háng")
    assert replaced and len(book.entries()) == 1
    book.add("en", "Nice", "/niːs/")
    text = (tmp_path / "pronunciations.tsv").read_text("utf-8")
    assert "zh\t银行\tyin2 hang2\n" in text and "en\tNice\t/niːs/\n" in text and text.startswith("#")
    assert book.delete("en", "NICE").word == "Nice"  # English words match without case
    with pytest.raises(NotFoundError) as caught:
        book.delete("en", "Nice")
    assert caught.value.code == "reading_entry_unknown"
    assert [e.word for e in PronunciationBook(tmp_path / "pronunciations.tsv").entries()] == ["银行"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_tsv_with_broken_lines_keeps_the_good_ones_and_lists_the_bad(tmp_path):
    book = PronunciationBook(tmp_path / "p.tsv")
    data = ("language\tword\treading\n"
            "zh\t重庆\tchong2 qing4\n"
            "zh\t生肖\tsheng1\n"                 # one syllable for two characters
            "en\tSiobhan\n"                      # a column missing
            "ja\t東京\tとうきょう\n"
            "en\tNice\t/niːs?/\n").encode()      # sentence punctuation
    report = book.import_tsv(data)
    assert (report.added, report.replaced) == (2, 0)
    assert [(p.line, p.code) for p in report.problems] == [
        (3, "reading_syllable_count"), (4, "reading_tsv_columns"), (6, "reading_punctuation")]
    assert sorted(e.word for e in book.entries()) == ["東京", "重庆"]
    assert book.import_tsv(book.export_tsv().encode()).replaced == 2  # export reads back in


def test_an_import_that_is_not_utf8_or_too_large_is_refused_whole(tmp_path, monkeypatch):
    book = PronunciationBook(tmp_path / "p.tsv")
    with pytest.raises(ReadingError) as caught:
        book.import_tsv("zh\t银行\tyin2 hang2\n".encode("gb18030"))
    assert caught.value.code == "reading_tsv_not_utf8"
    monkeypatch.setattr(book_module, "MAX_TSV_BYTES", 10)
    with pytest.raises(PayloadTooLargeError):
        book.import_tsv(b"zh\t\xe9\x93\xb6\t" * 3)
    assert not (tmp_path / "p.tsv").exists()


def test_a_damaged_file_is_skipped_line_by_line_and_kept_whole_before_the_next_write(tmp_path):
    path = tmp_path / "p.tsv"
    damaged = "zh\t银行\tyin2 hang2\nzh\t重庆\tchong2 qing9\nnonsense\n".encode()
    path.write_bytes(damaged)
    book = PronunciationBook(path, clock=lambda: 0.0)
    lexicon = book.lexicon()  # never raises
    assert [e.word for e in lexicon.entries] == ["银行"]
    assert [(p.line, p.code) for p in lexicon.problems] == [(2, "reading_tone_out_of_range"),
                                                            (3, "reading_tsv_columns")]
    book.add("zh", "生肖", "sheng1 xiao4")
    kept = tmp_path / "p.tsv.damaged-19700101T000000"
    assert kept.read_bytes() == damaged  # nothing the teacher saved is lost
    assert book.status()["kept_copy"] == str(kept) and book.status()["problems"] == []
    assert sorted(e.word for e in book.entries()) == ["生肖", "银行"]


def test_a_file_that_is_not_utf8_gives_no_entries_and_one_problem(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_bytes(b"zh\t\xff\xfe\tyin2\n")
    lexicon = PronunciationBook(path).lexicon()
    assert len(lexicon) == 0 and lexicon.problems[0].code == "reading_tsv_not_utf8"


def test_another_writer_is_seen_without_a_restart(tmp_path):
    path = tmp_path / "p.tsv"
    book = PronunciationBook(path)
    assert len(book.lexicon()) == 0
    PronunciationBook(path).add("zh", "银行", "yin2 hang2")
    assert [e.word for e in book.lexicon().entries] == ["银行"]


def test_parse_tsv_skips_comments_and_blank_lines():
    entries, problems = parse_tsv("# a comment\n\n  \nzh\t银行\tyin2 hang2\n")
    assert [e.word for e in entries] == ["银行"] and problems == []
