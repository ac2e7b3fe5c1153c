"""``python -m cosyedge speak`` on the tiny converted CosyVoice-300M models (base, SFT, Instruct).

Subprocesses in the app's environment (random weights: the output is noise): a preset of the SFT
model, an instruction on the Instruct model, an instruction on the SFT model (read as explicit
controls and reported, as the embedded engine does), and the base model refusing a preset, naming the
mode and the model.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import soundfile as sf

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # each command loads a model in a process of its own


def _speak(models_dir, model, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), COSYEDGE_ONNX_THREADS="1")
    return subprocess.run([sys.executable, "-m", "cosyedge", "speak", "--models-dir", str(models_dir),
                           "--model", model, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("model,args", [
    ("cosyvoice1-sft-tiny", ("--voice", "英文男")),
    ("cosyvoice1-sft-tiny", ()),  # the default --voice female_1 is the SFT speaker 中文女
    ("cosyvoice1-instruct-tiny", ("--voice", "中文女", "--instruct", "用开心的语气说")),
])
def test_speak_with_sft_speakers_and_instructions(tiny_cosyvoice_models, tmp_path, model, args):
    out = tmp_path / "out.wav"
    run = _speak(tiny_cosyvoice_models, model, "你好，世界。Hello there.", *args, "-o", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    audio, sr = sf.read(out)
    assert sr == 22050 and 0.05 < audio.size / sr < 30 and "wrote" in run.stdout


def test_speak_reports_what_a_model_cannot_do(tiny_cosyvoice_models, tmp_path):
    run = _speak(tiny_cosyvoice_models, "cosyvoice1-sft-tiny", "你好。", "--voice", "中文女", "--instruct",
                 "用四川话说，慢一点", "-o", str(tmp_path / "sft.wav"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "not applied" in run.stdout + run.stderr and (tmp_path / "sft.wav").is_file()
    assert "instruction read as app controls: CosyVoice-300M-SFT (cosyvoice1-sft-tiny) has no instruct mode" \
        in run.stdout
    run = _speak(tiny_cosyvoice_models, "cosyvoice1-tiny", "你好。", "--voice", "中文女", "-o", str(tmp_path / "b.wav"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "sft mode" in run.stderr and "cosyvoice1-tiny" in run.stderr and not (tmp_path / "b.wav").exists()
