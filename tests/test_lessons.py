"""cosyedge.service.lessons: reading a lesson file, cutting paragraphs, writing the WAV and the zip to disk."""

from __future__ import annotations

import errno
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.engines.base import SynthesisOptions
from cosyedge.errors import CancelledError, EngineError, PayloadTooLargeError, StorageFullError, TextError
from cosyedge.service.lessons import (PARAGRAPH_PAUSE_S, LessonPlan, WavAppender, load_lesson, markdown_to_text,
                              max_lesson_bytes, read_lesson, split_long, synthesize_lesson)
from tests.helpers.fake_engine import SAMPLE_RATE, FakeEngine

LIMIT = 60_000
PARAGRAPH = 5000


def read(text: str | bytes, name: str = "lesson.txt", limit: int = LIMIT):
    data = text.encode("utf-8") if isinstance(text, str) else text
    return read_lesson(data, name, limit, PARAGRAPH)


def test_paragraphs_are_split_at_blank_lines_and_lines_joined():
    lesson = read("\ufeffFirst line\nstill the first.\n\n\n  Second one.  \r\n\r\nThird.")
    assert lesson.paragraphs == ("First line still the first.", "Second one.", "Third.")
    assert lesson.name == "lesson"


def test_markdown_marks_are_dropped_and_headings_stand_alone():
    text = ("# Lesson 3: *Rivers*\nRivers run to the **sea**.\n\n- one [link](http://x.y)\n"
            "- two ![a map](map.png)\n\n```\ncode = 1\n```\n\n---\n> quoted `word`")
    assert read(text, "l.md").paragraphs == ("Lesson 3: Rivers", "Rivers run to the sea.",
                                              "one link two a map", "quoted word")
    assert "code" not in markdown_to_text(text)


def test_a_txt_file_keeps_its_marks():
    assert read("A *starred* word.").paragraphs == ("A *starred* word.",)


@pytest.mark.parametrize("data, code", [
    ("Grüße aus Köln".encode("latin-1"), "lesson_not_utf8"),
    ("你好".encode("gb18030"), "lesson_not_utf8"),
    (b"text\x00with a NUL", "lesson_not_text"),
    (b"  \n\n \t\n", "lesson_empty"),
    (b"# \n\n```\nonly code\n```", "lesson_empty"),
])
def test_bad_files_are_refused_with_a_code(data, code):
    with pytest.raises(TextError) as caught:
        read(data, "bad.md")
    assert caught.value.code == code


def test_only_txt_and_md_are_lessons():
    with pytest.raises(TextError) as caught:
        read("hello", "lesson.docx")
    assert caught.value.code == "lesson_file_type" and caught.value.params["suffix"] == ".docx"


def test_the_length_limit_is_the_lessons_own(tmp_path):
    lesson = read("word " * 2000 + "\n\n" + "more. " * 1000)  # 16,000 characters: over the text box
    assert lesson.chars > 15000 and all(len(p) <= PARAGRAPH for p in lesson.paragraphs)
    with pytest.raises(TextError) as caught:
        read("a" * 101, limit=100)
    assert caught.value.code == "lesson_too_long" and caught.value.params == {"length": 101, "limit": 100}


def test_a_20_mb_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(20 * 1024 * 1024)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read a file that is too large"))
    with pytest.raises(PayloadTooLargeError) as caught:
        load_lesson(big, LIMIT, PARAGRAPH)
    assert caught.value.code == "lesson_file_too_large"
    assert caught.value.params["size_mb"] == pytest.approx(20.97, abs=0.01)
    assert max_lesson_bytes(LIMIT) < 20 * 1024 * 1024


def test_a_paragraph_with_markup_names_its_number():
    with pytest.raises(TextError) as caught:
        read("Fine.\n\nAlso <break time='1s'/> fine.")
    assert caught.value.code == "lesson_paragraph_invalid"
    assert caught.value.params["paragraph"] == 2 and caught.value.params["reason"] == "text_markup"


def test_long_paragraphs_are_cut_at_sentence_ends_first():
    text = "One two three. " * 10 + "Four five."
    pieces = split_long(text.strip(), 40)
    assert all(len(p) <= 40 for p in pieces)
    assert all(p.endswith(".") for p in pieces)
    assert " ".join(pieces) == " ".join(text.split())
    cjk = "今天天气很好。" * 20
    assert "".join(split_long(cjk, 30)) == cjk and all(len(p) <= 30 for p in split_long(cjk, 30))
    assert all(len(p) <= 7 for p in split_long("x" * 30, 7))  # no end, no space: cut inside


def test_wav_appender_writes_a_complete_file_only_when_finished(tmp_path):
    path = tmp_path / "out.wav"
    writer = WavAppender(path, 16000)
    writer.append(np.full(1000, 0.5, dtype=np.float32))
    assert not path.exists() and writer.temp.exists()
    writer.append(np.zeros(500, dtype=np.float32))
    writer.finish()
    audio, rate = sf.read(path, dtype="float32")
    assert rate == 16000 and audio.shape == (1500,) and audio[0] == pytest.approx(0.5, abs=1e-4)
    assert not writer.temp.exists()
    aborted = WavAppender(tmp_path / "gone.wav", 16000)
    aborted.append(np.zeros(10, dtype=np.float32))
    aborted.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]


def plan() -> LessonPlan:
    return LessonPlan(voice="female_1", options=SynthesisOptions())


def test_synthesis_writes_every_paragraph_and_a_zip_of_them(tmp_path):
    engine = FakeEngine()
    lesson = read("First one. Two.\n\nSecond paragraph.\n\nThird.")
    phases: list[str] = []
    run = synthesize_lesson(engine, lesson, plan(), tmp_path / "l.wav", tmp_path / "l.zip", phase=phases.append)
    audio, rate = sf.read(tmp_path / "l.wav", dtype="float32")
    assert rate == SAMPLE_RATE and len(audio) == run.frames and run.sentences == 4 and run.paragraphs == 3
    assert [p.code for p in phases[:3]] == ["lesson_progress"] * 3
    assert [p.params["paragraph"] for p in phases[:3]] == [1, 2, 3]
    assert phases[0].params["seconds_left"] is None and phases[2].params["seconds_left"] is not None
    with zipfile.ZipFile(tmp_path / "l.zip") as archive:
        names = [n for n in archive.namelist() if n.endswith(".wav")]
        parts = [sf.read(io.BytesIO(archive.read(n)), dtype="float32")[0] for n in names]
    assert names == ["paragraph-001.wav", "paragraph-002.wav", "paragraph-003.wav"]
    pause = int(PARAGRAPH_PAUSE_S * SAMPLE_RATE)
    assert sum(len(p) for p in parts) + 2 * pause == len(audio)
    np.testing.assert_array_equal(parts[1], audio[len(parts[0]) + pause:len(parts[0]) + pause + len(parts[1])])
    assert [c[0] for c in engine.calls] == list(lesson.paragraphs)  # one paragraph per engine call


def test_a_cancel_or_a_refusal_leaves_no_file(tmp_path):
    lesson = read("One.\n\nTwo.\n\nThree.")
    calls = {"n": 0}

    def cancel_in_the_second() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    with pytest.raises(CancelledError):
        synthesize_lesson(FakeEngine(), lesson, plan(), tmp_path / "l.wav", tmp_path / "l.zip",
                          cancelled=cancel_in_the_second)
    rooms = iter([None, None])

    def room() -> None:
        if next(rooms, "full") == "full":
            raise StorageFullError("nearly full", code="disk_low")

    with pytest.raises(StorageFullError):
        synthesize_lesson(FakeEngine(), lesson, plan(), tmp_path / "l.wav", check_room=room)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_mid_lesson_is_storage_full_and_nothing_is_kept(tmp_path, monkeypatch):
    writes = {"n": 0}
    real_append = WavAppender.append

    def append(self, audio):
        writes["n"] += 1
        if writes["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(self, audio)

    monkeypatch.setattr(WavAppender, "append", append)
    with pytest.raises(StorageFullError) as caught:
        synthesize_lesson(FakeEngine(), read("One. Two.\n\nThree."), plan(), tmp_path / "l.wav")
    assert caught.value.code == "disk_full"
    assert list(tmp_path.iterdir()) == []


def cue_times(text: str) -> list[tuple[float, float]]:
    """(start, end) of each cue of an SRT or WebVTT file, in seconds."""
    def seconds(stamp: str) -> float:
        h, m, rest = stamp.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(rest)
    return [tuple(seconds(t) for t in line.split(" --> ")) for line in text.splitlines() if " --> " in line]


def test_a_lesson_has_one_caption_file_and_one_per_paragraph_in_the_zip(tmp_path):
    lesson = read("First one. Two.\n\nSecond paragraph.\n\nThird.")
    paths = [tmp_path / "l.srt", tmp_path / "l.vtt"]
    run = synthesize_lesson(FakeEngine(), lesson, plan(), tmp_path / "l.wav", tmp_path / "l.zip",
                            caption_paths=paths)
    audio, _ = sf.read(tmp_path / "l.wav", dtype="float32")
    whole = cue_times(paths[0].read_text("utf-8"))
    assert [c.text for c in run.captions.cues] == ["First one.", "Two.", "Second paragraph.", "Third."]
    assert cue_times(paths[1].read_text("utf-8")) == whole
    assert abs(whole[-1][1] - len(audio) / SAMPLE_RATE) < 0.002  # no drift: the last cue ends with the audio
    with zipfile.ZipFile(tmp_path / "l.zip") as archive:
        assert "paragraph-002.srt" in archive.namelist() and "paragraph-003.vtt" in archive.namelist()
        second = cue_times(archive.read("paragraph-002.srt").decode())
        first_audio, _ = sf.read(io.BytesIO(archive.read("paragraph-001.wav")), dtype="float32")
        second_audio, _ = sf.read(io.BytesIO(archive.read("paragraph-002.wav")), dtype="float32")
    assert second[0][0] == 0.0 and abs(second[-1][1] - len(second_audio) / SAMPLE_RATE) < 0.002
    # the paragraph's cue, moved by where the paragraph starts in the lesson, is the lesson's cue
    starts_at = (len(first_audio) + int(PARAGRAPH_PAUSE_S * SAMPLE_RATE)) / SAMPLE_RATE
    assert abs(whole[2][0] - starts_at) < 0.002 and abs(whole[2][1] - (second[0][1] + starts_at)) < 0.002


class FailsOn(FakeEngine):
    """Fails on the paragraph that contains ``word`` (after reading part of it)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        for chunk in super().synthesize(text, voice, options, progress, cancelled):
            yield chunk
            if self.word in getattr(text, "text", text):
                raise EngineError("the model broke", code="job_failed")


def test_a_paragraph_that_fails_keeps_the_paragraphs_before_it_and_says_which(tmp_path):
    lesson = read("One. Two.\n\nThree.\n\nBroken here. Not reached.\n\nFive.")
    paths = [tmp_path / "l.vtt"]
    run = synthesize_lesson(FailsOn("Broken"), lesson, plan(), tmp_path / "l.wav", tmp_path / "l.zip",
                            caption_paths=paths)
    audio, _ = sf.read(tmp_path / "l.wav", dtype="float32")
    assert run.paragraphs == 2 and len(audio) == run.frames
    assert [c.text for c in run.captions.cues] == ["One.", "Two.", "Three."]
    assert abs(cue_times(paths[0].read_text("utf-8"))[-1][1] - len(audio) / SAMPLE_RATE) < 0.002
    (note,) = run.notes
    assert note.code == "lesson_paragraph_failed" and note.params["paragraph"] == 3
    assert note.params["reason"] == "job_failed"
    with zipfile.ZipFile(tmp_path / "l.zip") as archive:
        assert sorted(n for n in archive.namelist() if n.endswith(".wav")) == ["paragraph-001.wav", "paragraph-002.wav"]


def test_a_first_paragraph_that_fails_keeps_nothing(tmp_path):
    with pytest.raises(EngineError):
        synthesize_lesson(FailsOn("One"), read("One.\n\nTwo."), plan(), tmp_path / "l.wav", tmp_path / "l.zip",
                          caption_paths=[tmp_path / "l.srt"])
    assert list(tmp_path.iterdir()) == []
