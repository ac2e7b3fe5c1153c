"""`python -m cosyedge models check` on the tiny CosyVoice2 model (random weights: the figures mean
nothing): the check runs in the CLI's process, prints each mode's verdict and stores modes.json, which
`models list` then shows; a model without speed modes is refused with exit 2."""

from __future__ import annotations

import pytest

from cosyedge.catalog.mode_verdicts import RESULT_NAME
from cosyedge.cli import main
from tests.helpers.model_folders import make_model
from tests.helpers.tiny_models import MODEL_ID
from tests.web.test_mode_check_tiny import linked_models

pytestmark = pytest.mark.slow  # the tiny model rendered three times, heard by Whisper


def test_models_check_prints_each_mode_and_list_shows_it(tiny_cosyvoice_models, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COSYEDGE_THREAD_CALIBRATION", "0")  # the flow would run to measure this host
    models = linked_models({MODEL_ID: tiny_cosyvoice_models}, tmp_path / "models")
    common = ["--models-dir", str(models), "--prompts-dir", str(tmp_path / "prompts"), "--onnx-threads", "2"]
    assert main(["models", "check", MODEL_ID, "--lines", "1", "--languages", "en", *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("balanced: ") and "\nlive: " in out and "similarity" in out
    assert "checked with preset" in out and (models / MODEL_ID / RESULT_NAME).is_file()
    assert main(["models", "list", *common]) == 0
    assert "speed modes: balanced " in capsys.readouterr().out


def test_models_check_refuses_a_model_without_speed_modes(tmp_path, capsys):
    make_model(tmp_path / "models", "kokoro-int8")
    assert main(["models", "check", "kokoro-int8", "--models-dir", str(tmp_path / "models")]) == 2
    assert "no speed modes" in capsys.readouterr().err
