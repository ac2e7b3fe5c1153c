"""`python -m cosyedge models list|import` on temporary folders (no real model needed)."""

from __future__ import annotations

from cosyedge.cli import main
from tests.helpers.model_folders import COSYVOICE_LICENCE, make_model


def test_import_then_list(tmp_path, capsys):
    models = tmp_path / "models"
    make_model(models, "kokoro-int8")
    source = make_model(tmp_path / "usb", "cosyvoice2-int8", engine="cosyvoice2", licence=COSYVOICE_LICENCE)
    common = ["--models-dir", str(models)]
    assert main(["models", "import", str(source), *common]) == 0
    out = capsys.readouterr().out
    assert "model 'cosyvoice2-int8'" in out and "every sha256 matched" in out and "--model cosyvoice2-int8" in out
    assert main(["models", "list", *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("  cosyvoice2-int8\tcosyvoice2\tclones a voice; follows instructions")
    assert "weights: Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B)" in lines[0]
    # its manifest has no streaming graphs: what converting it again brings, under its line
    assert lines[1].startswith("    convert again? converted before streaming: it answers each sentence whole")
    assert lines[2].startswith("* kokoro-int8\tkokoro\tclosest built-in voice only")


def test_a_wrong_sha256_is_one_line_exit_2_and_nothing_appears(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    source = make_model(tmp_path / "usb", "damaged")
    (source / "vocab.json").write_bytes(b"[]")  # same size as "{}"
    assert main(["models", "import", str(source), "--models-dir", str(models)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model folder") and "vocab.json does not match its sha256" in err
    assert list(models.iterdir()) == []
    assert main(["models", "list", "--models-dir", str(models)]) == 0
    assert "no usable model" in capsys.readouterr().out
