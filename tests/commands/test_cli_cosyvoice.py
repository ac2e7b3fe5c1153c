"""The CLI (``speak --model``, ``library``) on the tiny converted CosyVoice2 model, as a user runs it.

Subprocesses in the app's environment; the model (random weights: the output is noise) comes from
the ``tiny_cosyvoice_models`` fixture (built in .venv-ref by scripts/test.sh). The tests check
plumbing, durations and one-line errors.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import REPO
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

pytestmark = pytest.mark.slow  # each command loads the model in a process of its own


def _cosyedge(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([sys.executable, "-m", "cosyedge", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def _speak(models_dir, *args):
    return _cosyedge("speak", "--models-dir", str(models_dir), "--model", MODEL_ID, *args)


def _library(models_dir, prompts_dir, *args):
    return _cosyedge("library", *args, "--models-dir", str(models_dir), "--prompts-dir", str(prompts_dir),
                     "--model", MODEL_ID)


def test_cli_speak_with_a_cosyvoice_preset(tiny_cosyvoice_models, tmp_path):
    out = tmp_path / "preset.wav"
    run = _speak(tiny_cosyvoice_models, "Hello world. The quick brown fox!", "--voice", PRESET_NAMES[1],
                 "-o", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    audio, sr = sf.read(out)
    assert sr == 24000 and audio.ndim == 1 and 0.2 < audio.size / sr < 30
    assert "wrote" in run.stdout


def test_cli_speak_errors_are_one_line_reasons(tiny_cosyvoice_models, tmp_path):
    run = _speak(tiny_cosyvoice_models, "Hello.", "--voice", "nobody", "-o", str(tmp_path / "x.wav"))
    assert run.returncode == 2 and "nobody" in run.stderr and "Traceback" not in run.stderr
    run = _speak(tiny_cosyvoice_models, "Hello.", "--model", "missing-model", "-o", str(tmp_path / "y.wav"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()


def test_cli_clone_from_a_saved_voice_with_an_instruction(tiny_cosyvoice_models, tmp_path):
    """The CLI path of a clone + instruct request: `library save` a prompt, then `speak --voice-id
    --instruct`; the engine gets the native instruction, the output is a WAV of plausible length."""
    prompt = tmp_path / "me.wav"
    t = np.arange(4 * 16000) / 16000
    sf.write(prompt, (0.3 * np.sin(2 * np.pi * 160 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
                      ).astype(np.float32), 16000)
    prompts_dir = tmp_path / "prompts"
    saved = _library(tiny_cosyvoice_models, prompts_dir, "save", "Teacher", str(prompt),
                     "--transcript", "Hello world, this is a tiny test.", "--consent")
    assert saved.returncode == 0, saved.stderr[-2000:]
    listed = _library(tiny_cosyvoice_models, prompts_dir, "list")
    assert listed.returncode == 0 and "Teacher" in listed.stdout, listed.stdout + listed.stderr
    voice_id = next(line.split()[0] for line in listed.stdout.splitlines() if "Teacher" in line)
    out = tmp_path / "clone.wav"
    run = _speak(tiny_cosyvoice_models, "Hello world. The quick brown fox!", "--voice-id", voice_id,
                 "--prompts-dir", str(prompts_dir), "--instruct", "用开心的语气说", "-o", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    audio, sr = sf.read(out)
    assert sr == 24000 and 0.2 < audio.size / sr < 30
    assert "wrote" in run.stdout
