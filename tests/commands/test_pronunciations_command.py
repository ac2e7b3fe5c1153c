"""`python -m cosyedge pronunciations ...` end to end on a temporary prompts folder (no model needed)."""

from __future__ import annotations

from cosyedge.cli import main


def test_pronunciation_commands(tmp_path, capsys):
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["pronunciations", "add", "zh", "银行", "yin2 hang2", *common]) == 0
    assert "added: zh 银行 -> yin2 hang2" in capsys.readouterr().out
    assert main(["pronunciations", "add", "en", "Nice", "/niːs/", *common]) == 0
    tsv = tmp_path / "more.tsv"
    tsv.write_text("zh\t重庆\tchong2 qing4\nzh\t生肖\tsheng1\n", encoding="utf-8")
    assert main(["pronunciations", "import", str(tsv), *common]) == 1  # a line refused: exit 1
    out = capsys.readouterr()
    assert "1 added, 0 replaced, 1 line(s) refused" in out.out
    assert "line 2 not imported (reading_syllable_count)" in out.err
    assert main(["pronunciations", "delete", "en", "NICE", *common]) == 0
    assert "deleted: en Nice" in capsys.readouterr().out
    assert main(["pronunciations", "list", *common]) == 0
    assert capsys.readouterr().out == "zh\t重庆\tchong2 qing4\nzh\t银行\tyin2 hang2\n"
    exported = tmp_path / "out.tsv"
    assert main(["pronunciations", "export", "-o", str(exported), *common]) == 0
    assert exported.read_text("utf-8").endswith("zh\t重庆\tchong2 qing4\nzh\t银行\tyin2 hang2\n")
    assert (tmp_path / "prompts" / "pronunciations.tsv").read_text("utf-8") == exported.read_text("utf-8")


def test_a_bad_entry_is_one_line_naming_it_exit_2(tmp_path, capsys):
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["pronunciations", "add", "zh", "银行", "yin2 hang9", *common]) == 2
    assert "'银行'" in capsys.readouterr().err
    assert main(["pronunciations", "delete", "zh", "银行", *common]) == 2
    assert "no zh entry '银行'" in capsys.readouterr().err
