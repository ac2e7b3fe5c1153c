"""Approximate voice match on the real embedded model: it must raise similarity to a voice that no
preset has (a pitch- and formant-shifted Kokoro voice made here), on the probe and on held-out text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soxr

from cosyedge import config
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.kokoro import model_files, voice_match
from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.speaker import shared_encoder, similarity

pytestmark = pytest.mark.slow

# "Once upon a time, a kind old woman lived in a village." / "Please read this book by tomorrow."
TARGET_TEXT = "mɯkaɕimɯkaɕi, aɾɯ mɯɾa ɲi jasaɕii obaːsaɴ ɡa sɨnde i maɕita."
HELD_OUT_TEXT = "この本を明日までに読んでください。"


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> KokoroEngine:
    repo_model = Path("models") / model_files.MODEL_ID
    model_dir = repo_model if (repo_model / "manifest.json").is_file() else \
        model_files.assemble(tmp_path_factory.mktemp("models"))
    return KokoroEngine.load(model_dir, config.from_env({}, onnx_threads=2))


def shifted_voice(engine: KokoroEngine, pack: str, factor: float) -> np.ndarray:
    """Kokoro speech played back ``factor`` times as fast: pitch and formants move together (a
    different vocal tract and pitch), which no bundled pack has."""
    audio = engine.infer(engine.frontend.token_ids(TARGET_TEXT), engine.packs[pack], 1.0)
    return soxr.resample(audio, round(24000 * factor), 24000).astype(np.float32)


def speak(engine: KokoroEngine, text: str, voice) -> np.ndarray:
    return np.concatenate([c.audio for c in engine.synthesize(text, voice, SynthesisOptions(language="ja"))])


def test_match_raises_similarity_over_the_nearest_preset(engine):
    target = shifted_voice(engine, "jf_alpha", 0.85)
    budget = voice_match.MatchBudget(max_evals=10, deadline_s=1e9, seed=0)  # bounded by count: reproducible
    result = voice_match.match_voice(engine, target, 24000, "transcript", budget=budget)
    meta = result.meta
    assert meta["method"] == "approximate voice match"
    assert result.engine == "kokoro" and result.arrays["style"].shape == (510, 1, 256)
    assert np.isfinite(result.arrays["style"]).all()
    assert meta["nearest_preset"] in engine.presets()
    assert meta["similarity_after"] >= meta["similarity_before"] + 0.03, meta
    assert meta["probes"] <= 10 + len(engine.packs) + 1
    # Held out: a sentence the search never heard, spoken with the match vs. with the nearest preset.
    matched = similarity(speak(engine, HELD_OUT_TEXT, result), 24000, target, 24000)
    preset = similarity(speak(engine, HELD_OUT_TEXT, meta["nearest_preset"]), 24000, target, 24000)
    assert matched > preset, (matched, preset, meta)


def test_preset_voice_matches_itself_best(engine):
    """A prompt spoken by a bundled pack: the nearest preset is that pack and similarity is high."""
    target = shifted_voice(engine, "jm_kumo", 1.0)
    result = voice_match.match_voice(engine, target, 24000, None,
                                     budget=voice_match.MatchBudget(max_evals=2, deadline_s=1e9))
    assert result.meta["nearest_preset"] == "male_1"
    assert result.meta["similarity_before"] > 0.8


def test_similarity_is_a_cosine_that_separates_speakers(engine):
    a = speak(engine, HELD_OUT_TEXT, "female_1")
    b = speak(engine, "今日はいい天気ですね。", "female_1")
    c = speak(engine, "今日はいい天気ですね。", "male_1")
    same, different = similarity(a, 24000, b, 24000), similarity(a, 24000, c, 24000)
    assert -1.0 <= different < same <= 1.0
    assert same - different > 0.2
    enc = shared_encoder()
    assert abs(np.linalg.norm(enc.embed(a, 24000)) - 1.0) < 1e-4
