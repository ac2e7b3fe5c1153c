"""The speed-mode check's speaker judge: the model's own campplus.onnx when it can be used, the
project's d-vector otherwise. A campplus that fails to open or to embed does not fail the check: the
d-vector judges (with its own threshold) and the record, the page and the CLI say why.

No real CAM++ weights are on this box (docs/models.md, "The speed-mode check"): the tiny models carry a
stand-in campplus.onnx with random weights, so campplus's 0.90 is not measured here; these tests hold
the path, not the number."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.errors import ModelMissingError
from cosyedge.listening import mode_scores
from cosyedge.service import mode_check
from cosyedge.service.mode_check import JUDGE_FALLBACK, judge_of


class JudgedEngine:
    """An engine as judge_of sees it: ``speaker_judge`` opens the model's campplus (or fails to)."""

    def __init__(self, opens) -> None:
        self.opens = opens

    def speaker_judge(self):
        return self.opens()


def working_embed(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    return np.array([float(np.abs(audio).mean()), 1.0, 2.0], dtype=np.float32)


def refuse_to_open():
    raise ModelMissingError("campplus.onnx does not match its sha256 in the manifest: copy it again")


def nan_embed(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    return np.full(192, np.nan, dtype=np.float32)


def broken_embed(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input")


def test_a_working_campplus_judges():
    judge = judge_of(JudgedEngine(lambda: working_embed))
    assert judge.name == mode_scores.JUDGE_CAMPPLUS and judge.embed is working_embed and judge.note is None


def test_a_model_without_campplus_is_judged_by_the_d_vector_without_a_note():
    judge = judge_of(object())  # an engine with no speaker_judge (Kokoro, the fake engine)
    assert judge.name == mode_scores.JUDGE_DVECTOR and judge.note is None
    judge = judge_of(JudgedEngine(lambda: None))  # built without one
    assert judge.name == mode_scores.JUDGE_DVECTOR and judge.note is None


@pytest.mark.parametrize("opens, why", [
    (refuse_to_open, "does not match its sha256"),
    (lambda: broken_embed, "INVALID_ARGUMENT"),
    (lambda: nan_embed, "not all finite"),
], ids=["fails to open", "fails to embed", "embeds NaN"])
def test_a_campplus_that_cannot_judge_falls_back_to_the_d_vector_with_a_note(opens, why):
    judge = judge_of(JudgedEngine(opens))
    assert judge.name == mode_scores.JUDGE_DVECTOR
    assert judge.note is not None and judge.note["code"] == JUDGE_FALLBACK and why in judge.note["message"]
    vector = judge.embed(np.sin(np.arange(16000) / 10.0).astype(np.float32), 16000)
    assert np.isfinite(vector).all() and vector.size > 0


@pytest.mark.slow  # the tiny CosyVoice2 model renders exact, balanced and live
def test_a_tiny_model_with_a_damaged_campplus_is_checked_with_the_d_vector(tiny_cosyvoice_models, tmp_path):
    from cosyedge.config import Settings
    from cosyedge.service.facade import Service
    from cosyedge.web.mode_check_panel import describe
    from tests.helpers.fake_recognizer import FakeRecognizer
    from tests.helpers.tiny_models import MODEL_ID
    from tests.web.test_mode_check_tiny import linked_models

    models = linked_models({MODEL_ID: tiny_cosyvoice_models}, tmp_path / "models")
    campplus = models / MODEL_ID / "campplus.onnx"
    size = campplus.stat().st_size
    campplus.unlink()  # a link into the shared build: replaced, not written through
    campplus.write_bytes(bytes(range(256)) * (size // 256) + b"\0" * (size % 256))  # same size, not ONNX
    settings = Settings(root=tmp_path, models_dir=models, model=MODEL_ID, onnx_threads=1, idle_unload_minutes=0,
                        thread_calibration=False, auto_mode_check=False).validate()
    line = mode_check.all_lines()["en"][0]
    service = Service(settings, recognizer=FakeRecognizer(text=line))
    service.start()
    try:
        service.mode_checks.per_language, service.mode_checks.languages = 1, ("en",)
        service.check_modes(MODEL_ID)
        assert service.mode_checks.wait(300), "the check did not end"
        answer = service.mode_check(MODEL_ID)
    finally:
        service.close()
    assert answer["status"]["state"] == "done", answer["status"]
    result = answer["result"]
    assert result["judge"] == mode_scores.JUDGE_DVECTOR and set(result["modes"]) == {"balanced", "live"}
    assert [note["code"] for note in result["notes"]] == [JUDGE_FALLBACK]
    assert "campplus.onnx" in result["notes"][0]["message"]
    # judged by the d-vector's own threshold, and the page says why
    assert result["thresholds"]["min_similarity"][mode_scores.JUDGE_DVECTOR] == 0.85
    page = describe(answer)
    assert "judged by d-vector" in page and "could not be used" in page and "d-vector 评判" in page
