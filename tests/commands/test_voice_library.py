"""`python -m cosyedge library ...` end to end on a temporary prompts folder (no model needed)."""

from __future__ import annotations

import soundfile as sf

from cosyedge.cli import main
from tests.test_audio_prompt import speechlike


def test_library_commands(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0, rate=44100), 44100)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), "--transcript", "hello", *common]) == 0
    assert "saved voice 'ms-lee'" in capsys.readouterr().out
    assert main(["library", "list", *common]) == 0
    assert "ms-lee\tMs Lee" in capsys.readouterr().out
    assert main(["library", "rename", "ms-lee", "Teacher Lee", *common]) == 0
    zip_path = tmp_path / "lee.zip"
    assert main(["library", "export", "teacher-lee", "-o", str(zip_path), *common]) == 0
    assert main(["library", "delete", "teacher-lee", *common]) == 0
    assert main(["library", "import", str(zip_path), *common]) == 0
    capsys.readouterr()
    assert main(["library", "list", *common]) == 0
    assert "teacher-lee\tTeacher Lee" in capsys.readouterr().out


def test_library_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch):
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "delete", "nobody", *common]) == 2
    assert "no saved voice 'nobody'" in capsys.readouterr().err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    assert main(["library", "save", "../x", str(bad), *common]) == 2
    assert main(["library", "save", "ok", str(bad), *common]) == 2
    assert "not a recognised audio file" in capsys.readouterr().err
    big = tmp_path / "big.wav"
    big.write_bytes(b"\0" * 2_000_000)
    monkeypatch.setenv("COSYEDGE_MAX_UPLOAD_MB", "1")
    assert main(["library", "save", "ok", str(big), *common]) == 2
    assert "limit" in capsys.readouterr().err


def test_export_to_a_place_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), *common]) == 0
    capsys.readouterr()
    for output, reason in [(tmp_path, "Is a directory"), (tmp_path / "missing" / "lee.zip", "No such file"),
                           (wav / "lee.zip", "Not a directory")]:
        assert main(["library", "export", "ms-lee", "-o", str(output), *common]) == 2  # was a traceback
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write {output}: {reason}") and err.count("\n") == 1, err
    assert main(["library", "export", "ms-lee", "-o", str(tmp_path / "lee.zip"), *common]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lee.zip", "me.wav", "prompts"]  # no temp left
