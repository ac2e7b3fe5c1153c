"""The embedded engine on the real Kokoro-82M int8 model."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.service import synthesis
from cosyedge.engines.base import SynthesisOptions
from cosyedge.errors import TextError
from tests.helpers.shared_engine import SharedEngine

pytestmark = pytest.mark.slow


def speak(engine, text, voice="female_1", **opts):
    return synthesis.synthesize(engine, text, voice, SynthesisOptions(**opts), max_chars=100_000)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


@pytest.mark.parametrize("text, lo, hi", [
    ("Hello, world.", 0.6, 2.5),
    ("[zh]今天天气真好[en]It's sunny today", 1.5, 5.0),
    ("今日はとてもいい天気ですね。", 1.0, 4.0),
])
def test_speech_is_non_silent_and_plausibly_long(kokoro_engine, text, lo, hi):
    result = speak(kokoro_engine, text)
    assert result.sample_rate == 24000
    assert lo <= result.duration <= hi, result.duration
    assert rms(result.audio) > 0.02
    assert np.abs(result.audio).max() <= 1.0


def test_declared_abilities_match_the_engine(kokoro_engine):
    """What the page says before the engine loads (by the manifest's engine name) is what it can do."""
    from cosyedge.catalog.abilities import NATIVE_ABILITIES

    caps = kokoro_engine.capabilities
    assert NATIVE_ABILITIES[kokoro_engine.name] == (caps.native_clone, caps.native_instruct)


def test_output_is_deterministic(kokoro_engine):
    a = speak(kokoro_engine, "The same words, twice.").audio
    b = speak(kokoro_engine, "The same words, twice.").audio
    np.testing.assert_array_equal(a, b)


def test_duration_grows_roughly_linearly_with_text(kokoro_engine):
    one = "The quick brown fox jumps over the lazy dog."
    d1 = speak(kokoro_engine, one).duration
    d3 = speak(kokoro_engine, " ".join([one] * 3)).duration
    assert 2.4 <= d3 / d1 <= 3.6, (d1, d3)


def test_speed_changes_duration(kokoro_engine):
    text = "Reading a little faster, please."
    normal = speak(kokoro_engine, text).duration
    fast = speak(kokoro_engine, text, speed=1.5).duration
    slow = speak(kokoro_engine, text, speed=0.7).duration
    assert fast < normal < slow


def test_male_preset_is_lower_than_female(kokoro_engine):
    import librosa

    def median_f0(voice):
        audio = speak(kokoro_engine, "This is a short test sentence.", voice=voice).audio
        f0, _, _ = librosa.pyin(audio, fmin=60, fmax=500, sr=24000)
        return float(np.nanmedian(f0))

    assert median_f0("male_1") < 0.7 * median_f0("female_1")


@pytest.mark.parametrize("text", ["", "   ", "。，！？...", "😀😀🎉"])
def test_unspeakable_text_is_a_text_error(kokoro_engine, text):
    with pytest.raises(TextError):
        speak(kokoro_engine, text)


def test_text_over_the_limit_is_refused_before_synthesis(kokoro_engine):
    with pytest.raises(TextError, match="limit is 5000"):
        synthesis.synthesize(kokoro_engine, "a" * 100_000, "female_1", SynthesisOptions(), max_chars=5000)


def test_long_first_sentence_streams_a_short_clause_first_and_the_same_audio(kokoro_engine, make_service):
    from cosyedge.engines.kokoro.engine import CLAUSE_PAUSE_S
    from cosyedge.service.requests import TTSRequest

    service = make_service(factory=lambda: SharedEngine(kokoro_engine))
    text = "Every spring, the school organizes a trip to the mountains. The children walk along the river."
    job = service.submit(TTSRequest(text=text), stream=True)
    pieces = list(job.stream.pieces(timeout=120))
    assert job.wait(60)
    first, second = pieces[0], pieces[1]
    assert 0.5 < first.size / 24000 < 1.6   # "Every spring," alone, not the 4.5 s sentence
    assert len(pieces) == 3
    gap = int(CLAUSE_PAUSE_S["en"] * 24000)
    assert not second[:gap].any() and second[gap:].any()   # clause pause, then speech
    plain = service.submit(TTSRequest(text=text))
    assert plain.wait(60)
    np.testing.assert_array_equal(np.concatenate(pieces), plain.outcome().audio)


def test_two_calls_in_flight_give_the_sequential_chunks(kokoro_engine):
    import dataclasses

    from cosyedge.engines.kokoro.pipeline import Overlap

    text = ("Every spring, the school organizes a trip. The children walk along the river. "
            "At noon everyone sits on the grass.")
    options = SynthesisOptions(language="en")
    sequential = dataclasses.replace(kokoro_engine, parallel_runs=1)
    # its own run slots (so the peak below is its own), two runs at once (the fused runner's engine
    # runs one by default) and a policy that always overlaps
    pipelined = dataclasses.replace(kokoro_engine, parallel_runs=2, overlap=Overlap(first=True))
    one = list(sequential.synthesize(text, "female_1", options))
    two = list(pipelined.synthesize(text, "female_1", options))
    assert pipelined.runs.peak == 2 and sequential.runs.peak == 1
    assert [c.text for c in two] == [c.text for c in one] and len(one) == 4
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a.audio, b.audio)
        assert a.pause_after_s == b.pause_after_s


def test_a_one_thread_engine_runs_one_call_at_a_time(kokoro_models_dir):
    # the thermal governor's fewer threads must also turn the overlap off
    from cosyedge import config
    from cosyedge.engines.loader import load_engine

    engine = load_engine(config.from_env({}, models_dir=kokoro_models_dir, onnx_threads=1))
    try:
        assert engine.parallel_runs == 1 and engine.runs.slots == 1
    finally:
        engine.close()


def test_engine_load_readies_the_language_detector(kokoro_models_dir, monkeypatch):
    # langdetect loads its 55 profiles on first use (~0.3 s): at load, not in the first English job
    import langdetect.detector_factory as factory

    from cosyedge import config
    from cosyedge.engines.loader import load_engine
    from cosyedge.text import langid

    readied = []
    load_detector = langid.load_detector
    monkeypatch.setattr(langid, "load_detector", lambda: readied.append(True) or load_detector())
    engine = load_engine(config.from_env({}, models_dir=kokoro_models_dir, onnx_threads=1))
    try:
        assert readied == [True]
        monkeypatch.setattr(factory.DetectorFactory, "load_profile",
                            lambda *a, **k: pytest.fail("profiles loaded in a job"))
        engine.frontend.sentences("The first English request of the day, long enough to be checked.")
    finally:
        engine.close()


def test_the_fused_runner_runs_one_call_at_a_time(kokoro_engine):
    # its calls keep both cores busy: a second run beside one only costs CPU (docs/bench-log/kokoro.md)
    import dataclasses

    from cosyedge.engines.kokoro.fused_runtime import FusedSession

    assert isinstance(kokoro_engine.session, FusedSession)
    engine = dataclasses.replace(kokoro_engine)  # its own run slots, so the peak below is this job's
    assert engine.parallel_runs == 1 and engine.runs.slots == 1
    text = "Every spring, the school organizes a trip. The children walk along the river."
    chunks = list(engine.synthesize(text, "female_1", SynthesisOptions(language="en")))
    assert len(chunks) >= 3 and engine.runs.peak == 1


def test_engine_loads_the_runtime_graph_named_in_the_manifest(kokoro_models_dir, monkeypatch):
    from cosyedge.config import from_env
    from cosyedge.engines.kokoro import engine as engine_module
    from cosyedge.export.kokoro import assembly
    from cosyedge.catalog.manifest import read_manifest

    assembled = assembly.assemble(kokoro_models_dir)  # up to date with this code
    opened = []
    real = engine_module.make_session

    def spy(path, threads, graph_optimization="all"):
        opened.append((path.name, graph_optimization))
        return real(path, threads, graph_optimization)

    monkeypatch.setattr(engine_module, "make_session", spy)
    engine = engine_module.KokoroEngine.load(assembled, from_env({}, onnx_threads=1))
    # setup checked the fused runner on this graph (step 3), so the engine runs it that way
    from cosyedge.engines.kokoro.fused_runtime import FusedSession

    assert isinstance(engine.session, FusedSession) and opened == []
    engine.close()
    manifest = read_manifest(assembled, "hint")
    graph = {k: v for k, v in manifest["runtime_graph"].items() if k != "runner"}
    assert engine_module.open_runtime(assembled, graph, 1) is not None
    assert opened == [(assembly.RUNTIME_NAME, "disable")]
