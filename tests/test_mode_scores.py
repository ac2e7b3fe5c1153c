"""The speed-mode check's figures and verdict on made-up audio and a stand-in recognizer and judge:
identical renditions, a voice the judge finds far, a reading the recognizer hears worse, the units of
each scoring method, the mel distance and the duration ratio."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.listening import mode_scores
from cosyedge.listening.mode_scores import Rendition, Thresholds

RATE = 16000


def tone(hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.4 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def renditions(lines, hz: float = 200.0, seconds: float = 1.0) -> list[Rendition]:
    return [Rendition(text, language, tone(hz, seconds), RATE) for text, language in lines]


def hearing(exact_heard: list[str], mode_heard: list[str]):
    """A stand-in recognizer answering in the order compare asks: each line's exact, then its mode."""
    answers = iter([text for pair in zip(exact_heard, mode_heard) for text in pair])
    return lambda audio, rate, language: next(answers)


LINES = [("Good morning, class.", "en"), ("请把课本翻到这一页。", "zh"), ("Guten Morgen, liebe Klasse.", "de")]


def embed_by_pitch(audio: np.ndarray, rate: int) -> np.ndarray:
    """A stand-in judge: the spectrum's peak bin as a one-hot-ish vector (same tone -> same vector)."""
    spectrum = np.abs(np.fft.rfft(audio[:RATE]))[:1000]
    vector = np.zeros(50)
    vector[int(np.argmax(spectrum)) // 20] = 1.0
    vector[0] += 0.1
    return vector


def test_identical_renditions_give_similarity_one_no_drop_and_a_recommendation():
    exact, mode = renditions(LINES), renditions(LINES)
    said = [text for text, _ in LINES]
    figures = mode_scores.compare(exact, mode, embed_by_pitch, hearing(said, said))
    assert figures.similarity == pytest.approx(1.0)
    assert figures.intelligibility_delta == 0 and figures.intelligibility_exact == 100.0
    assert figures.duration_ratio == 1.0 and figures.mel_distance_db == pytest.approx(0.0, abs=1e-6)
    assert Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR).recommended
    assert figures.languages["de"].method == "words" and figures.languages["zh"].method == "pronunciation"


def test_another_voice_fails_the_similarity_rule():
    exact, mode = renditions(LINES, hz=200.0), renditions(LINES, hz=900.0)
    said = [text for text, _ in LINES]
    figures = mode_scores.compare(exact, mode, embed_by_pitch, hearing(said, said))
    verdict = Thresholds().judge(figures, mode_scores.JUDGE_CAMPPLUS)
    assert not verdict.recommended and verdict.failed == ("similarity_low",)
    assert figures.mel_distance_db > 5


def test_a_reading_heard_worse_fails_the_intelligibility_rule_by_points():
    exact, mode = renditions(LINES), renditions(LINES)
    said = [text for text, _ in LINES]
    worse = ["Good evening, glass.", "请把课本翻到那一页。", "Guten Morgen, liebe Klasse."]
    figures = mode_scores.compare(exact, mode, embed_by_pitch, hearing(said, worse))
    # three units of the 3 words + 9 syllables + 4 words the set is scored in
    assert figures.extra_errors == 3 and figures.intelligibility_delta == pytest.approx(-300 / 16, abs=0.01)
    verdict = Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR)
    assert verdict.failed == ("intelligibility_drop",)
    assert Thresholds(max_drop_points=20).judge(figures, mode_scores.JUDGE_DVECTOR).recommended


def test_fewer_extra_errors_than_the_floor_are_the_recognizers_noise():
    exact, mode = renditions(LINES), renditions(LINES)
    said = [text for text, _ in LINES]
    worse = ["Good evening, glass.", "请把课本翻到这一页。", "Guten Morgen, liebe Klasse."]
    figures = mode_scores.compare(exact, mode, embed_by_pitch, hearing(said, worse))
    assert figures.extra_errors == 2 and figures.intelligibility_delta < -10
    assert Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR).recommended
    assert not Thresholds(min_drop_units=2).judge(figures, mode_scores.JUDGE_DVECTOR).recommended


def test_an_exact_the_recognizer_cannot_hear_is_no_ground_for_a_recommendation():
    exact, mode = renditions(LINES), renditions(LINES)
    figures = mode_scores.compare(exact, mode, embed_by_pitch, hearing(["la la"] * 3, ["la la"] * 3))
    assert figures.intelligibility_exact < 50 and figures.intelligibility_delta == 0
    assert Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR).failed == ("exact_not_heard",)


def test_a_silent_rendition_is_every_unit_missed_without_asking_the_recognizer():
    silent = Rendition("Good morning, class.", "en", np.zeros(0, dtype=np.float32), RATE)
    asked = []
    heard = mode_scores.hear_line(silent, lambda *args: asked.append(args) or "x")
    assert not asked and heard.errors == heard.units == 3


def test_units_of_each_method():
    assert mode_scores.units("여러분 안녕하세요.", "ko") == (list("여러분안녕하세요"), "characters")
    assert mode_scores.units("Bonjour à tous.", "fr") == (["bonjour", "à", "tous"], "words")
    assert mode_scores.units("Guten Morgen", "xx") == ([], "not scored")
    assert mode_scores.score_heard("Доброе утро, класс.", "доброе утро класс", "ru").errors == 0


def test_an_unscored_set_is_not_judged_by_intelligibility():
    lines = [("Bom dia.", "pt")]
    figures = mode_scores.compare(renditions(lines), renditions(lines), embed_by_pitch, lambda *a: "bom dia")
    assert figures.intelligibility_delta is None and figures.not_scored == ["pt"]
    assert Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR).failed == ("intelligibility_not_scored",)


def test_duration_ratio_and_a_stretched_copy_aligned_by_dtw():
    lines = [("Good morning, class.", "en")]
    exact = renditions(lines, seconds=1.0)
    longer = renditions(lines, seconds=1.5)
    figures = mode_scores.compare(exact, longer, embed_by_pitch, lambda *a: "Good morning, class.")
    assert figures.duration_ratio == pytest.approx(1.5, abs=0.01)
    assert figures.mel_distance_db < 3, "the same tone stretched aligns closely"


def test_compare_refuses_different_line_sets():
    with pytest.raises(ValueError):
        mode_scores.compare(renditions(LINES), renditions(LINES[:2]), embed_by_pitch, None)
