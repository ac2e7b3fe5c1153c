"""`python -m cosyedge library ...` end to end on a temporary prompts folder (no model needed)."""

from __future__ import annotations

import soundfile as sf

from cosyedge.cli import main
from tests.test_audio_prompt import speechlike


def test_library_commands(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0, rate=44100), 44100)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), "--transcript", "hello", "--consent",
                 *common]) == 0
    assert "saved voice 'ms-lee'" in capsys.readouterr().out
    assert main(["library", "list", *common]) == 0
    assert "ms-lee\tMs Lee\t5.0 s\tconsent given " in capsys.readouterr().out
    assert main(["library", "rename", "ms-lee", "Teacher Lee", *common]) == 0
    assert "renamed 'ms-lee' to Teacher Lee (its id stays)" in capsys.readouterr().out
    zip_path = tmp_path / "lee.zip"
    assert main(["library", "export", "ms-lee", "-o", str(zip_path), *common]) == 0
    assert main(["library", "import", str(zip_path), *common]) == 2  # its id is here
    assert "voice_exists" in capsys.readouterr().err
    assert main(["library", "import", str(zip_path), "--rename", *common]) == 0
    assert "imported voice 'teacher-lee-2' (Teacher Lee 2)" in capsys.readouterr().out
    assert main(["library", "delete", "ms-lee", *common]) == 0
    assert main(["library", "import", str(zip_path), *common]) == 0
    capsys.readouterr()
    assert main(["library", "list", *common]) == 0
    listed = capsys.readouterr().out
    assert "ms-lee\tTeacher Lee\t" in listed and "teacher-lee-2\tTeacher Lee 2\t" in listed


def test_library_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch):
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "delete", "nobody", *common]) == 2
    assert "no saved voice 'nobody'" in capsys.readouterr().err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    assert main(["library", "save", "../x", str(bad), "--consent", *common]) == 2
    assert main(["library", "save", "ok", str(bad), "--consent", *common]) == 2
    assert "not a recognised audio file" in capsys.readouterr().err
    big = tmp_path / "big.wav"
    big.write_bytes(b"\0" * 2_000_000)
    monkeypatch.setenv("COSYEDGE_MAX_UPLOAD_MB", "1")
    assert main(["library", "save", "ok", str(big), "--consent", *common]) == 2
    assert "limit" in capsys.readouterr().err


def test_export_to_a_place_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), "--consent", *common]) == 0
    capsys.readouterr()
    for output, reason in [(tmp_path, "Is a directory"), (tmp_path / "missing" / "lee.zip", "No such file"),
                           (wav / "lee.zip", "Not a directory")]:
        assert main(["library", "export", "ms-lee", "-o", str(output), *common]) == 2  # was a traceback
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write {output}: {reason}") and err.count("\n") == 1, err
    assert main(["library", "export", "ms-lee", "-o", str(tmp_path / "lee.zip"), *common]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lee.zip", "me.wav", "prompts"]  # no temp left


def test_save_without_consent_is_refused_and_saves_nothing(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), *common]) == 2
    err = capsys.readouterr().err
    assert "needs your confirmation that the speaker" in err and "--consent" in err, err
    assert main(["library", "list", *common]) == 0
    assert "no saved voices" in capsys.readouterr().out


def test_save_refuses_a_preset_name_like_the_service(tmp_path, capsys):
    """`library save male_1` would save a voice no one could ask for by name (the preset wins):
    refused with the same check as the page and REST, and nothing is written."""
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    for name in ("male_1", "Female 2"):
        assert main(["library", "save", name, str(wav), "--consent", *common]) == 2
        assert "is the name of a preset voice" in capsys.readouterr().err
    assert main(["library", "list", *common]) == 0
    assert "no saved voices" in capsys.readouterr().out


def test_rename_and_import_refuse_a_preset_name_like_save(tmp_path, capsys):
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), "--consent", *common]) == 0
    zip_path = tmp_path / "lee.zip"
    assert main(["library", "export", "ms-lee", "-o", str(zip_path), *common]) == 0
    capsys.readouterr()
    assert main(["library", "rename", "ms-lee", "Male 1", *common]) == 2
    assert "is the name of a preset voice" in capsys.readouterr().err
    assert main(["library", "import", str(zip_path), "--name", "child", *common]) == 2
    assert "is the name of a preset voice" in capsys.readouterr().err
    assert main(["library", "list", *common]) == 0
    assert capsys.readouterr().out.startswith("ms-lee\tMs Lee\t")  # only the voice as it was


def test_the_preset_name_check_is_one_function(tmp_path):
    from cosyedge.errors import NameError_
    from cosyedge.service.requests import SEED_PRESETS
    from cosyedge.voices.library import refuse_preset_name

    refuse_preset_name("Ms Lee", SEED_PRESETS)
    refuse_preset_name(None, SEED_PRESETS)  # not text: name_to_id words that refusal
    for name in ("male_1", " Female   2 ", "CHILD"):
        try:
            refuse_preset_name(name, SEED_PRESETS)
        except NameError_ as exc:
            assert exc.code == "voice_name_preset" and exc.params["preset"] in SEED_PRESETS
        else:
            raise AssertionError(f"{name!r} passed the check")


def test_consent_travels_through_export_and_import(tmp_path, capsys):
    """The record keeps the moment it was given, through a zip and back."""
    from cosyedge.voices.library import VoiceLibrary

    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0), 24000)
    common = ["--prompts-dir", str(tmp_path / "prompts")]
    assert main(["library", "save", "Ms Lee", str(wav), "--consent", *common]) == 0
    library = VoiceLibrary(tmp_path / "prompts" / "library")
    given = library.get("ms-lee").consent
    assert given is not None and given.reference is None
    zip_path = tmp_path / "lee.zip"
    assert main(["library", "export", "ms-lee", "-o", str(zip_path), *common]) == 0
    assert main(["library", "delete", "ms-lee", *common]) == 0
    assert main(["library", "import", str(zip_path), *common]) == 0
    assert library.get("ms-lee").consent == given


def test_library_transcript_shows_sets_and_hears(tmp_path, capsys, monkeypatch):
    from cosyedge.listening import asr
    from tests.helpers.fake_recognizer import FakeRecognizer

    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(5.0, rate=44100), 44100)
    common = ["--prompts-dir", str(tmp_path / "prompts"), "--models-dir", str(tmp_path / "models")]
    assert main(["library", "save", "Ms Lee", str(wav), "--consent", *common]) == 0
    capsys.readouterr()
    assert main(["library", "transcript", "ms-lee", *common]) == 0
    assert "no transcript" in capsys.readouterr().out
    fake = FakeRecognizer(text="Good morning, class.", confidence=0.6)
    monkeypatch.setattr(asr.Recognizer, "for_models", classmethod(lambda cls, *a, **k: fake))
    assert main(["library", "transcript", "ms-lee", "--hear", *common]) == 0
    out = capsys.readouterr().out
    assert "heard offline, confidence 0.60 (cross-lingual until corrected): Good morning, class." in out
    assert fake.calls and fake.releases == 1
    assert main(["library", "transcript", "ms-lee", "Good morning, everyone.", *common]) == 0
    assert "typed: Good morning, everyone." in capsys.readouterr().out
    import pytest

    with pytest.raises(SystemExit) as both:  # argparse refuses a text and --hear together
        main(["library", "transcript", "ms-lee", "x", "--hear", *common])
    assert both.value.code == 2


def test_save_encode_says_each_step_of_a_cosyvoice_encoding(tiny_cosyvoice_models, tmp_path, capsys, monkeypatch):
    """`library save --encode` on CosyVoice (seconds to tens of seconds on two cores) says each step
    as it starts, as the page and /jobs do; the encoding is the cache entry the voice's first use reads."""
    from tests.helpers.tiny_models import MODEL_ID

    monkeypatch.setenv("COSYEDGE_THREAD_CALIBRATION", "0")  # it would write into the shared model folder
    wav = tmp_path / "me.wav"
    sf.write(wav, speechlike(4.0), 16000)
    assert main(["library", "save", "Ms Lee", str(wav), "--transcript", "hello there", "--consent", "--encode",
                 "--prompts-dir", str(tmp_path / "prompts"), "--models-dir", str(tiny_cosyvoice_models),
                 "--model", MODEL_ID, "--onnx-threads", "1"]) == 0
    said = capsys.readouterr()
    steps = [line for line in said.err.splitlines() if line.startswith("preparing the voice: step")]
    assert steps == ["preparing the voice: step 1 of 4 (opening the prompt encoders)",
                     "preparing the voice: step 2 of 4 (speech tokens)",
                     "preparing the voice: step 3 of 4 (prompt mel)",
                     "preparing the voice: step 4 of 4 (speaker embedding)"], said.err
    assert "saved voice 'ms-lee'" in said.out
    assert len(list((tmp_path / "prompts" / "cache").glob("*.npz"))) == 1
