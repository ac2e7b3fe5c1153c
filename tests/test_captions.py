"""cosyedge.service.captions: cues placed by the joined audio's real offsets, one per sentence, and
the SRT / WebVTT writers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cosyedge.audio import SENTENCE_PAUSE_S, Joiner
from cosyedge.engines.base import AudioChunk, WordTiming
from cosyedge.service.captions import CaptionTrack, Captions, Cue, WordCue, to_srt, to_vtt

SR = 1000  # one sample a millisecond keeps the arithmetic readable


def chunk(text, samples, **kwargs):
    return AudioChunk(audio=np.full(samples, 0.5, np.float32), sample_rate=SR, text=text, index=0, total=1, **kwargs)


def track_of(chunks, effects=None):
    joiner, track, audio = Joiner(SR), CaptionTrack(SR), []
    for c in chunks:
        piece = joiner.piece(c.audio, c.pause_after_s, c.continues)
        out = effects(piece) if effects is not None and piece.size else piece
        track.add(c, piece, out.size)
        audio.append(out)
    return track.captions(), np.concatenate(audio)


def test_one_cue_per_sentence_at_the_joined_audios_offsets_pauses_included():
    caps, audio = track_of([chunk("One.", 400), chunk("Two.", 300), chunk("Three.", 200)])
    pause = SENTENCE_PAUSE_S
    assert [(c.text, c.start, c.end) for c in caps.cues] == [
        ("One.", 0.0, 0.4), ("Two.", pytest.approx(0.4 + pause), pytest.approx(0.7 + pause)),
        ("Three.", pytest.approx(0.7 + 2 * pause), pytest.approx(0.9 + 2 * pause))]
    assert caps.cues[-1].end == pytest.approx(audio.size / SR)


def test_a_sentence_cut_at_a_clause_is_one_cue_and_a_streamed_sentence_too():
    caps, audio = track_of([chunk("我们今天学习，", 300, pause_after_s=0.15, ends_sentence=False),
                            chunk("明天考试。", 200),
                            chunk("Streamed.", 100, continues=True), chunk("Streamed.", 100)])
    assert [c.text for c in caps.cues] == ["我们今天学习，明天考试。", "Streamed."]
    assert caps.cues[0].end == pytest.approx(0.3 + 0.15 + 0.2)
    assert caps.cues[1].end == pytest.approx(audio.size / SR)


def test_a_silent_chunk_makes_no_cue_and_moves_nothing():
    caps, _ = track_of([chunk("One.", 400), chunk("nothing", 0), chunk("Two.", 300)])
    assert [c.text for c in caps.cues] == ["One.", "Two."]
    assert caps.cues[1].start == pytest.approx(0.4 + SENTENCE_PAUSE_S)


def test_words_are_placed_in_the_joined_audio_and_follow_effects_that_change_the_length():
    words = (WordTiming("Two", 0.0, 0.1), WordTiming("words", 0.15, 0.3))
    caps, _ = track_of([chunk("One.", 400), chunk("Two words.", 300, words=words)])
    start = 0.4 + SENTENCE_PAUSE_S
    assert [(w.text, w.start, w.end) for w in caps.cues[1].words] == [
        ("Two", pytest.approx(start), pytest.approx(start + 0.1)),
        ("words", pytest.approx(start + 0.15), pytest.approx(start + 0.3))]
    stretched, audio = track_of([chunk("One.", 400), chunk("Two words.", 300, words=words)],
                                effects=lambda piece: np.repeat(piece, 2))
    assert stretched.cues[1].words[1].start == pytest.approx(2 * (start + 0.15))
    assert stretched.cues[-1].end == pytest.approx(audio.size / SR)


def test_srt_and_vtt_say_the_same_cues_in_their_formats():
    cues = (Cue(0.0, 1.5, "Hello <there> & you"), Cue(3661.25, 3662.0, "a --> b"))
    assert to_srt(cues) == ("1\n00:00:00,000 --> 00:00:01,500\nHello <there> & you\n\n"
                            "2\n01:01:01,250 --> 01:01:02,000\na → b\n")
    vtt = to_vtt(cues)
    assert vtt.startswith("WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.500\nHello &lt;there&gt; &amp; you\n")
    assert "01:01:01.250 --> 01:01:02.000\na → b\n" in vtt


def test_vtt_word_timestamps_sit_inside_the_cue_in_order_with_the_punctuation_kept():
    words = (WordCue("Hello", 1.0, 1.3), WordCue("there", 1.35, 1.6), WordCue("Smith", 1.7, 2.0),
             WordCue("again", 1.7, 2.1))  # not after the one before: no timestamp
    text = Captions((Cue(1.0, 2.1, "Hello there, Mr. Smith again!", words),)).render("vtt")
    body = text.splitlines()[4]
    assert body == ("Hello <00:00:01.350>there, Mr. <00:00:01.700>Smith again!")
    stamps = [s for s in re.findall(r"<([\d:.]+)>", body)]
    assert stamps == sorted(stamps)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError):
        Captions().render("ass")


def test_shifted_moves_cues_and_words():
    caps = Captions((Cue(0.5, 1.0, "x", (WordCue("x", 0.5, 1.0),)),)).shifted(10)
    assert (caps.cues[0].start, caps.cues[0].words[0].end) == (10.5, 11.0)
    assert caps.as_dicts()[0] == {"start": 10.5, "end": 11.0, "text": "x",
                                  "words": [{"text": "x", "start": 10.5, "end": 11.0}]}
