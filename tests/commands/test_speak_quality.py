"""``speak --quality``, a bare ``speak`` on a model without presets, and ``voices`` on one (tiny
converted CosyVoice models, in process through the CLI's own ``main``: exit codes and one-line reasons)."""

from __future__ import annotations

import pytest

from cosyedge.cli import main
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

pytestmark = pytest.mark.slow  # loads the tiny models

CLONE_ONLY = "cosyvoice1-tiny"  # CosyVoice-300M base: no SFT speakers, clones only


def _speak(models, model: str, *args: str) -> list[str]:
    return ["speak", "Hello world.", "--models-dir", str(models), "--model", model, "--onnx-threads", "1", *args]


def test_quality_is_used_and_its_levers_are_printed(tiny_cosyvoice_models, tmp_path, capsys):
    out = tmp_path / "live.wav"
    assert main(_speak(tiny_cosyvoice_models, MODEL_ID, "--voice", PRESET_NAMES[0], "--quality", "live",
                       "-o", str(out))) == 0
    said = capsys.readouterr().out
    assert "flow steps: 4 (fast" in said and "quality live: 4 flow steps, no CFG" in said and out.is_file()
    assert main(_speak(tiny_cosyvoice_models, MODEL_ID, "--voice", PRESET_NAMES[0], "-o", str(out))) == 0
    assert "quality " not in capsys.readouterr().out  # exact, the default: no levers to name


def test_an_unknown_quality_exits_2_naming_the_modes(tiny_cosyvoice_models, tmp_path, capsys):
    out = tmp_path / "x.wav"
    assert main(_speak(tiny_cosyvoice_models, MODEL_ID, "--quality", "fastest", "-o", str(out))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "quality 'fastest' must be one of exact, balanced, live" in err[0]
    assert not out.exists()


def test_a_bare_speak_on_a_model_without_presets_says_it_clones(tiny_cosyvoice_models, tmp_path, capsys):
    out = tmp_path / "x.wav"
    assert main(_speak(tiny_cosyvoice_models, CLONE_ONLY, "-o", str(out))) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"the model {CLONE_ONLY} has no preset voices: it clones a voice from a recording" in line
    assert "--voice-id" in line and "female_1" not in line and not out.exists()


def test_voices_says_on_stderr_that_a_model_without_presets_clones(tiny_cosyvoice_models, capsys):
    assert main(["voices", "--models-dir", str(tiny_cosyvoice_models), "--model", CLONE_ONLY,
                 "--onnx-threads", "1"]) == 0
    said = capsys.readouterr()
    assert said.out == "" and "has no preset voices: it clones a voice from a recording" in said.err
