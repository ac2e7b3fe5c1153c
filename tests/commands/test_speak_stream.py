"""``speak -o -`` writes a CosyVoice sentence to stdout hop by hop (tiny converted model, in process)."""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np
import pytest
import soundfile as sf

from cosyedge.commands import speak
from tests.helpers.hop_gate import HopGate
from tests.helpers.tiny_models import MODEL_ID, PRESET_NAMES

pytestmark = pytest.mark.slow  # loads the tiny model

TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence, "
        "and then it reads another long clause so that the speech runs for several hops.")


class Pipe(io.RawIOBase):
    """stdout.buffer stand-in: records each flushed write and releases the gate at the first audio."""

    def __init__(self, gate: HopGate) -> None:
        self.gate, self.writes = gate, []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001
        self.writes.append(bytes(data))
        if sum(len(w) for w in self.writes) > 44:  # past the WAV header: audio reached the pipe
            self.gate.release()
        return len(data)


def test_dash_output_streams_hops_as_they_are_made(tiny_cosyvoice_models, monkeypatch, capsys):
    gate = HopGate().install(monkeypatch)
    pipe = Pipe(gate)
    monkeypatch.setattr(sys, "stdout", type("Out", (), {"buffer": pipe})())
    parser = argparse.ArgumentParser()
    speak.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["speak", TEXT, "--voice", PRESET_NAMES[0], "-o", "-", "--models-dir",
                              str(tiny_cosyvoice_models), "--model", MODEL_ID])
    assert speak.run(args) == 0
    assert gate.released_in_time is True, "hop 1 did not reach stdout before hop 2 was made"
    assert len(pipe.writes) >= 4  # header + at least three hops
    audio, rate = sf.read(io.BytesIO(b"".join(pipe.writes)), dtype="int16")
    assert rate == 24000 and audio.size == sum(len(w) for w in pipe.writes[1:]) // 2
    assert np.abs(audio).max() > 0
    assert "1 sentences, streamed" in capsys.readouterr().err


def test_flow_steps_are_stated_and_checked(tiny_cosyvoice_models, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    speak.register(parser.add_subparsers(dest="command", required=True))
    common = ["--voice", PRESET_NAMES[0], "--models-dir", str(tiny_cosyvoice_models), "--model", MODEL_ID]
    out = tmp_path / "fast.wav"
    assert speak.run(parser.parse_args(["speak", "Hello world.", "-o", str(out), "--flow-steps", "4", *common])) == 0
    said = capsys.readouterr().out
    assert "flow steps: 4 (fast: fewer than upstream's 10, not validated on real weights)" in said
    assert speak.run(parser.parse_args(["speak", "Hello world.", "-o", str(out), *common])) == 0
    assert "flow steps: 10 (standard, as upstream)" in capsys.readouterr().out
    from cosyedge.errors import ParameterError
    with pytest.raises(ParameterError) as err:
        speak.run(parser.parse_args(["speak", "Hello.", "-o", str(out), "--flow-steps", "11", *common]))
    assert err.value.code == "flow_steps_out_of_range"
