"""`speak` in-process on the fake engine: the CLI runs the service's request path (one prepare step)."""

from __future__ import annotations

import pytest
import soundfile as sf

from cosyedge.cli import main
from cosyedge.errors import CosyedgeError
from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.request_path import record_request_path


@pytest.fixture
def engines(monkeypatch):
    """The engines the CLI loads (fake ones), in order."""
    made: list[FakeEngine] = []

    def load_engine(settings):
        made.append(FakeEngine())
        return made[-1]

    monkeypatch.setattr("cosyedge.commands.speak.load_engine", load_engine)
    return made


def speak(tmp_path, *args: str) -> list[str]:
    return ["speak", *args, "--prompts-dir", str(tmp_path / "prompts"),
            "--models-dir", str(tmp_path / "models")]


def test_speak_prepares_and_resolves_like_the_service(tmp_path, engines, monkeypatch, capsys):
    prepared, resolved = record_request_path(monkeypatch)
    out = tmp_path / "hello.wav"
    assert main(speak(tmp_path, "Hello there. Bye.", "--instruct", "louder", "-o", str(out))) == 0
    assert [p.request for p in prepared] == [TTSRequest(text="Hello there. Bye.", speaker=None,
                                                        instruct="louder")]
    assert resolved == prepared
    (engine,) = engines
    assert engine.analyses == 1  # one text pass, as in the service
    assert sf.info(out).samplerate == 24000
    stdout = capsys.readouterr().out
    assert "applied: " in stdout and f"wrote {out} (" in stdout and "2 sentences)" in stdout


@pytest.mark.parametrize("fields, flags", [
    ({"text": "<speak>Hello</speak>"}, ["<speak>Hello</speak>"]),
    ({"text": "x" * 5001}, ["x" * 5001]),
    ({"text": "hi", "speed": 3.0}, ["hi", "--speed", "3"]),
    ({"text": "hi", "voice_id": "nobody"}, ["hi", "--voice-id", "nobody"]),
    ({"text": "hi", "instruct": "x" * 501}, ["hi", "--instruct", "x" * 501]),
])
def test_speak_refuses_what_the_service_refuses_in_the_same_words(tmp_path, engines, make_service,
                                                                 capsys, fields, flags):
    with pytest.raises(CosyedgeError) as refused:
        make_service().submit(TTSRequest(**fields))
    assert main(speak(tmp_path, *flags, "-o", str(tmp_path / "x.wav"))) == 2
    assert capsys.readouterr().err.strip() == f"error: {refused.value.message} [{refused.value.code}]"
    assert engines == []  # refused before the model loads


def test_speak_writes_captions_at_the_audios_offsets(tmp_path, engines, capsys):
    out, captions = tmp_path / "hello.wav", tmp_path / "hello.vtt"
    assert main(speak(tmp_path, "Hello there. Bye now.", "-o", str(out), "--captions", str(captions))) == 0
    text = captions.read_text("utf-8")
    assert text.startswith("WEBVTT\n") and "Hello there." in text and "Bye now." in text
    last_end = text.strip().splitlines()[-2].split(" --> ")[1]
    seconds = sf.info(out).frames / sf.info(out).samplerate
    h, m, s = last_end.split(":")
    assert abs(int(h) * 3600 + int(m) * 60 + float(s) - seconds) < 0.002  # the last cue ends with the audio
    assert f"wrote {captions} (2 cues)" in capsys.readouterr().out


def test_speak_to_stdout_writes_the_captions_of_what_it_streamed(tmp_path, engines, capsysbinary):
    srt = tmp_path / "hello.srt"
    assert main(speak(tmp_path, "Hello there. Bye now.", "-o", "-", "--captions", str(srt))) == 0
    assert capsysbinary.readouterr().out.startswith(b"RIFF")
    assert srt.read_text("utf-8").startswith("1\n00:00:00,000 --> ") and "2\n" in srt.read_text("utf-8")


def test_speak_refuses_a_caption_file_of_another_kind_before_the_model_loads(tmp_path, engines, capsys):
    assert main(speak(tmp_path, "Hello.", "-o", str(tmp_path / "x.wav"), "--captions", str(tmp_path / "x.txt"))) == 2
    assert "srt, vtt" in capsys.readouterr().err
    assert engines == []
