"""The speed-mode check's rules on real recordings made here (espeak-ng and festival voices reading
the check's own English lines), heard by the offline Whisper and judged by the d-vector, as the check
does on a model without campplus: identical audio is similarity 1 and recommended; another speaker
reading the same lines is not (similarity); the right speaker reading garbled lines is not
(intelligibility). The rates over many more voices are bench/mode_check_evidence.py's."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from bench.mode_check_evidence import check_lines, espeak, festival, garble
from cosyedge.listening import mode_scores
from cosyedge.listening.asr import Recognizer
from cosyedge.listening.mode_scores import Rendition, Thresholds
from cosyedge.listening.speaker import SpeakerEncoder

pytestmark = pytest.mark.slow  # real voices, Whisper base

LINES = 3


def read(speak, text: str, path: Path) -> Rendition:
    speak(text, path, "base")
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    return Rendition(text, "en", audio[:, 0], int(rate))


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    for tool in ("espeak-ng", "text2wave"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install espeak-ng festival festvox-kallpc16k "
                        "(scripts/setup.sh --dev does)", pytrace=False)
    folder = tmp_path_factory.mktemp("voices")
    texts = check_lines("en", LINES)
    own, other = espeak("en-us+m3"), festival("kal_diphone")
    exact = [read(own, text, folder / f"own{i}.wav") for i, text in enumerate(texts)]
    garbled = []
    for i, text in enumerate(texts):
        said = read(own, garble(text, "en"), folder / f"garbled{i}.wav")
        garbled.append(Rendition(text, "en", said.audio, said.sample_rate))  # judged against the real line
    others = [read(other, text, folder / f"other{i}.wav") for i, text in enumerate(texts)]
    recognizer = Recognizer(threads=2, idle_seconds=0)
    encoder = SpeakerEncoder.load(2)

    def hear(audio: np.ndarray, rate: int, language: str) -> str:
        return recognizer.transcribe(audio, rate, language).text

    def judge(mode: list[Rendition]):
        figures = mode_scores.compare(exact, mode, encoder.embed, hear)
        return figures, Thresholds().judge(figures, mode_scores.JUDGE_DVECTOR)

    copies = [Rendition(r.text, r.language, r.audio.copy(), r.sample_rate) for r in exact]
    yield {"identical": judge(copies), "other speaker": judge(others), "garbled": judge(garbled)}
    recognizer.release()


def test_identical_audio_is_similarity_one_and_recommended(judged):
    figures, verdict = judged["identical"]
    assert figures.similarity == pytest.approx(1.0, abs=1e-4) and figures.intelligibility_delta == 0
    assert figures.mel_distance_db == pytest.approx(0.0, abs=1e-6) and verdict.recommended


def test_another_speaker_reading_the_same_lines_is_not_recommended(judged):
    figures, verdict = judged["other speaker"]
    assert not verdict.recommended and "similarity_low" in verdict.failed, figures


def test_the_right_speaker_reading_garbled_lines_fails_the_intelligibility_rule(judged):
    figures, verdict = judged["garbled"]
    assert not verdict.recommended and "intelligibility_drop" in verdict.failed, figures
