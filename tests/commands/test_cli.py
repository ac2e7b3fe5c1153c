"""The CLI as a user runs it: subprocesses, exit codes, one-line reasons, no network."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def cli(args, models_dir: Path, *, stdin: str | bytes | None = None, netns: bool = False,
        env: dict[str, str] | None = None):
    env = {**os.environ, "COSYEDGE_MODELS_DIR": str(models_dir), "PYTHONPATH": str(REPO), **(env or {})}
    cmd = [sys.executable, "-m", "cosyedge", *args]
    if netns:
        cmd = ["unshare", "-rn", *cmd]  # a new, empty network namespace: no interface but lo (down)
    return subprocess.run(cmd, input=stdin, capture_output=True, text=not isinstance(stdin, bytes), env=env,
                          cwd=REPO, timeout=300)


def test_speak_writes_a_wav(kokoro_models_dir, tmp_path):
    out = tmp_path / "hello.wav"
    proc = cli(["speak", "Hello, world.", "-o", str(out)], kokoro_models_dir)
    assert proc.returncode == 0, proc.stderr
    info = sf.info(out)
    assert info.samplerate == 24000 and info.channels == 1 and 0.6 < info.duration < 2.5


def test_speak_reads_stdin(kokoro_models_dir, tmp_path):
    out = tmp_path / "stdin.wav"
    proc = cli(["speak", "-f", "-", "--voice", "male_1", "-o", str(out)], kokoro_models_dir, stdin="你好。")
    assert proc.returncode == 0, proc.stderr
    assert sf.info(out).duration > 0.3


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare missing")
def test_speak_works_without_network(kokoro_models_dir, tmp_path):
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"cannot create a network namespace here: {probe.stderr!r}")
    out = tmp_path / "offline.wav"
    proc = cli(["speak", "[ja]こんにちは。[en]Offline works.", "-o", str(out)], kokoro_models_dir, netns=True)
    assert proc.returncode == 0, proc.stderr
    assert sf.info(out).duration > 0.5


def test_voices_lists_presets(kokoro_models_dir):
    proc = cli(["voices"], kokoro_models_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["female_1", "female_2", "male_1", "male_2", "child"]


@pytest.mark.parametrize("args, needle", [
    (["speak", "", "-o", "x.wav"], "text is empty"),
    (["speak", "!!!", "-o", "x.wav"], "nothing"),
    (["speak", "hi", "--voice", "nobody", "-o", "x.wav"], "choose one of female_1"),
    (["speak", "hi", "--speed", "3", "-o", "x.wav"], "speed 3.0 is out of range"),
    (["speak", "hi", "--quality", "fastest", "-o", "x.wav"], "must be one of exact, balanced, live"),
    (["speak", "hi", "--speed", "0.1", "-o", "x.wav"], "speed 0.1 is out of range"),
    (["speak", "-o", "x.wav"], "no text"),
    (["speak", "-f", "/nonexistent.txt", "-o", "x.wav"], "cannot read text file"),
])
def test_bad_input_exits_2_with_one_line(kokoro_models_dir, tmp_path, args, needle):
    args = [a if a != "x.wav" else str(tmp_path / "x.wav") for a in args]
    proc = cli(args, kokoro_models_dir)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], proc.stderr
    assert not (tmp_path / "x.wav").exists()


def one_error_line(proc) -> str:
    stderr = proc.stderr.decode() if isinstance(proc.stderr, bytes) else proc.stderr
    lines = stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), stderr
    return lines[0]


def test_text_that_is_not_utf8_is_one_line_from_a_file_and_from_stdin(tmp_path):
    models = tmp_path / "no-models"  # refused before the model is needed
    # a desktop's UTF-8 locale decodes stdin strictly (PYTHONIOENCODING does the same here): that was a
    # traceback; under the C locale the bad bytes were dropped silently and the rest read aloud
    proc = cli(["speak", "-f", "-", "-o", str(tmp_path / "x.wav")], models,
               stdin="Un café.".encode("latin-1"), env={"PYTHONIOENCODING": "utf-8"})
    assert "standard input: it is not UTF-8 text" in one_error_line(proc)
    latin1 = tmp_path / "lesson.txt"
    latin1.write_bytes("Un café, s'il vous plaît.".encode("latin-1"))
    line = one_error_line(cli(["speak", "-f", str(latin1), "-o", str(tmp_path / "x.wav")], models))
    assert "not UTF-8 text (byte 0xe9 at position 6)" in line
    assert not (tmp_path / "x.wav").exists()


def test_an_output_that_cannot_be_written_is_refused_before_synthesis(kokoro_models_dir, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    for output, needle in [(tmp_path, "is a folder; give a file name"),
                           (a_file / "x.wav", "is not a writable folder")]:
        proc = cli(["speak", "Hello.", "-o", str(output)], kokoro_models_dir)
        line = one_error_line(proc)  # was a traceback, after the whole text had been synthesized
        assert needle in line and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_output_dash_is_a_wav_on_stdout(kokoro_models_dir, tmp_path):
    proc = cli(["speak", "Hello.", "-o", "-"], kokoro_models_dir, stdin=b"")
    assert proc.returncode == 0, proc.stderr
    info = sf.info(io.BytesIO(proc.stdout))
    assert info.samplerate == 24000 and info.duration > 0.3
    assert b"wrote WAV to stdout" in proc.stderr and not (REPO / "-").exists()


def test_too_long_text_is_refused(kokoro_models_dir, tmp_path):
    long_file = tmp_path / "long.txt"
    long_file.write_text("word " * 20_000, encoding="utf-8")  # 100,000 characters
    proc = cli(["speak", "-f", str(long_file), "-o", str(tmp_path / "x.wav")], kokoro_models_dir)
    assert proc.returncode == 2 and "limit is 5000" in proc.stderr


def test_missing_model_says_which_command_fixes_it(tmp_path):
    proc = cli(["speak", "hi", "-o", str(tmp_path / "x.wav")], tmp_path / "empty-models")
    assert proc.returncode == 2 and "setup-model" in proc.stderr
