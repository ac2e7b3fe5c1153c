"""Models converted before keep speaking in every ``quality`` mode, with the levers they can take.

Two tiny models as older converters wrote them: the first streaming converter's packed estimator
cache (built beside the tiny model, tests/helpers/legacy_flow_stream.py), which streams but cannot
drop chunks (no bounded left context), and a model from before streaming (the tiny model's manifest
without ``flow.stream``), which answers each sentence whole (steps and CFG only).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.loader import load_engine
from tests.helpers import tiny_models

pytestmark = pytest.mark.slow  # loads the tiny models

TEXT = "The quick brown fox jumps over the lazy dog, and the tiny tokenizer reads it for several hops."


def _engine(models_dir, model_id):
    return load_engine(Settings(models_dir=models_dir, model=model_id, onnx_threads=1, thread_calibration=False))


def _batches(session_calls: list[int], steps: int) -> set[tuple[int, ...]]:
    return {tuple(session_calls[i:i + steps]) for i in range(0, len(session_calls), steps)}


class BatchSpy:
    def __init__(self, session) -> None:
        self.session, self.batches = session, []

    def run(self, names, feeds):  # noqa: ANN001
        self.batches.append(feeds["x"].shape[0])
        return self.session.run(names, feeds)

    def get_inputs(self):  # noqa: ANN201
        return self.session.get_inputs()


@pytest.fixture(scope="module")
def before_streaming(tiny_cosyvoice_models, tmp_path_factory):
    """The tiny model as a converter before streaming wrote it: no ``flow.stream`` in its manifest."""
    source = tiny_cosyvoice_models / tiny_models.MODEL_ID
    models = tmp_path_factory.mktemp("old-models")
    target = models / "cosyvoice2-before-streaming"
    target.mkdir()
    for path in source.iterdir():
        if path.name != "manifest.json":
            (target / path.name).symlink_to(path)
    manifest = json.loads((source / "manifest.json").read_text())
    del manifest["config"]["flow"]["stream"]
    (target / "manifest.json").write_text(json.dumps(manifest))
    return models, target.name


def test_the_packed_cache_model_streams_live_without_the_bounded_context(tiny_cosyvoice_models):
    engine = _engine(tiny_models.legacy_models_dir(tiny_cosyvoice_models.parent), tiny_models.PACKED_STREAM_MODEL_ID)
    try:
        levers = engine.quality_levers("live")
        assert (levers.steps, levers.guided_steps, levers.left_chunks, levers.first_hop_tokens) == (4, 0, 0, 10)
        assert set(engine.inapplicable_levers) == {"left_chunks"}  # the answer's note names it apart
        encoder, step = engine.token2wav.flow.stream_sessions
        spy = BatchSpy(step)
        engine.token2wav.flow.stream_sessions = (encoder, spy)
        chunks = list(engine.synthesize(TEXT, engine.presets()[0], SynthesisOptions(seed=3, stream=True,
                                                                                      quality="live")))
        assert len(chunks) >= 3 and all(np.isfinite(c.audio).all() for c in chunks)
        assert chunks[0].audio.size == (2 * 10 - 8) * 480  # the short first hop, less HiFT's held-back frames
        assert _batches(spy.batches, 4) == {(1, 1, 1, 1)}  # 4 steps, no CFG
        assert engine.token2wav.flow.stream_cache_bytes == 0
    finally:
        engine.close()


def test_a_model_from_before_streaming_speaks_live_whole(before_streaming):
    engine = _engine(*before_streaming)
    try:
        assert not engine.token2wav.can_stream
        levers = engine.quality_levers("live")
        assert (levers.steps, levers.guided_steps, levers.left_chunks, levers.first_hop_tokens) == (4, 0, 0, 0)
        assert set(engine.inapplicable_levers) == {"left_chunks", "first_hop_tokens"}
        spy = BatchSpy(engine.token2wav.flow.estimator_session)
        engine.token2wav.flow.estimator_session = spy
        chunks = list(engine.synthesize(TEXT, engine.presets()[0], SynthesisOptions(seed=3, stream=True,
                                                                                      quality="live")))
        assert [c.continues for c in chunks] == [False] * len(chunks) and chunks[0].audio.size > 0
        assert _batches(spy.batches, 4) == {(1, 1, 1, 1)}
    finally:
        engine.close()
