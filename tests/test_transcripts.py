"""Prompt transcripts (cosyedge/voices/transcripts.py): what was heard and when it may drive a zero-shot clone."""

from __future__ import annotations

import numpy as np

from cosyedge.voices import transcripts
from cosyedge.voices.transcripts import (CROSS_LINGUAL, SOURCE_HEARD, SOURCE_USER, ZERO_SHOT, ZERO_SHOT_CONFIDENCE,
                                  PromptTranscript, clone_plan, hear)
from tests.helpers.fake_recognizer import FakeRecognizer


def test_a_typed_transcript_always_clones_zero_shot_without_a_note():
    plan = clone_plan(PromptTranscript("  你好，世界。 ", source=SOURCE_USER))
    assert (plan.transcript, plan.mode, plan.note) == ("你好，世界。", ZERO_SHOT, None)


def test_a_heard_transcript_drives_zero_shot_only_from_the_threshold_up():
    sure = clone_plan(PromptTranscript("hello there", SOURCE_HEARD, confidence=ZERO_SHOT_CONFIDENCE))
    assert (sure.transcript, sure.mode, sure.note.code) == ("hello there", ZERO_SHOT, "transcript_heard")
    assert sure.note.params["confidence"] == ZERO_SHOT_CONFIDENCE
    unsure = clone_plan(PromptTranscript("hello there", SOURCE_HEARD, confidence=ZERO_SHOT_CONFIDENCE - 0.01))
    assert (unsure.transcript, unsure.mode, unsure.note.code) == (None, CROSS_LINGUAL, "transcript_unsure")
    assert "hello there" in unsure.note and unsure.note.params["threshold"] == ZERO_SHOT_CONFIDENCE


def test_nothing_heard_or_no_recognizer_clones_cross_lingually_saying_why():
    silent = clone_plan(PromptTranscript("", SOURCE_HEARD, confidence=0.0))
    assert (silent.mode, silent.note.code) == (CROSS_LINGUAL, "transcript_not_heard")
    missing = clone_plan(None, unavailable="the speech recognizer is not installed")
    assert (missing.mode, missing.note.code) == (CROSS_LINGUAL, "transcript_unavailable")
    assert "not installed" in missing.note


def test_hear_names_the_three_languages_and_detects_others():
    recognizer = FakeRecognizer(text=" 你好 ", confidence=0.876543, language="zh")
    audio = np.zeros(16000, np.float32)
    heard = hear(recognizer.transcribe, audio, 16000, "zh")
    assert heard == PromptTranscript("你好", SOURCE_HEARD, confidence=0.8765, language="zh")
    hear(recognizer.transcribe, audio, 16000, "auto")
    hear(recognizer.transcribe, audio, 16000, "ko")
    assert [call[2] for call in recognizer.calls] == ["zh", None, None]
    assert heard.as_dict() == {"text": "你好", "source": "asr", "confidence": 0.8765, "language": "zh",
                               "trusted": True}


def test_the_threshold_is_a_probability():
    assert 0.0 < transcripts.ZERO_SHOT_CONFIDENCE < 1.0


def test_heard_mandarin_is_written_in_simplified_characters_and_typed_text_is_kept():
    """Whisper often writes Mandarin in traditional characters; a heard transcript is simplified
    character by character, Japanese kanji and a typed transcript are left as they are."""
    from types import SimpleNamespace

    import numpy as np

    from cosyedge.voices.transcripts import PromptTranscript, SOURCE_USER, hear

    def recognizer(text: str, language: str):
        return lambda audio, rate, named: SimpleNamespace(text=text, language=language, confidence=0.9)

    audio = np.zeros(16000, np.float32)
    heard = hear(recognizer("今天天氣很好，我們去公園散步。", "zh"), audio, 16000)
    assert heard.text == "今天天气很好，我们去公园散步。"
    assert hear(recognizer("東京は晴れです。", "ja"), audio, 16000).text == "東京は晴れです。"
    typed = PromptTranscript(text="今天天氣很好。", source=SOURCE_USER)
    assert typed.text == "今天天氣很好。"  # nothing converts what a person wrote
