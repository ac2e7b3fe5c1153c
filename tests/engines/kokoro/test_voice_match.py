"""Approximate voice match on the real embedded model: it must raise similarity to a voice that no
preset has (a pitch- and formant-shifted Kokoro voice made here), on the probe and on held-out text."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.kokoro import voice_match
from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.listening.speaker import shared_encoder, similarity

# "Once upon a time, a kind old woman lived in a village." / "Please read this book by tomorrow."
TARGET_TEXT = "mɯkaɕimɯkaɕi, aɾɯ mɯɾa ɲi jasaɕii obaːsaɴ ɡa sɨnde i maɕita."
HELD_OUT_TEXT = "この本を明日までに読んでください。"


@pytest.fixture(scope="module")
def engine(kokoro_engine) -> KokoroEngine:
    return kokoro_engine  # conftest: the real model, loaded once per session


def shifted_voice(engine: KokoroEngine, pack: str, factor: float) -> np.ndarray:
    """Kokoro speech played back ``factor`` times as fast: pitch and formants move together (a
    different vocal tract and pitch), which no bundled pack has."""
    audio = engine.infer(engine.frontend.token_ids(TARGET_TEXT), engine.packs[pack], 1.0)
    return soxr.resample(audio, round(24000 * factor), 24000).astype(np.float32)


def speak(engine: KokoroEngine, text: str, voice) -> np.ndarray:
    return np.concatenate([c.audio for c in engine.synthesize(text, voice, SynthesisOptions(language="ja"))])


@pytest.mark.slow
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
    assert meta["probes"] == 10  # the pack/preset probes come from the stored table (or the memo)
    # Held out: a sentence the search never heard, spoken with the match vs. with the nearest preset.
    matched = similarity(speak(engine, HELD_OUT_TEXT, result), 24000, target, 24000)
    preset = similarity(speak(engine, HELD_OUT_TEXT, meta["nearest_preset"]), 24000, target, 24000)
    assert matched > preset, (matched, preset, meta)


@pytest.mark.slow
def test_a_cancelled_match_stops_between_probes(engine):
    """The job's Cancel reaches the search: it stops at the next probe, returning nothing."""
    from cosyedge.errors import CancelledError

    target = shifted_voice(engine, "jf_alpha", 0.85)
    asked: list[int] = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 2

    budget = voice_match.MatchBudget(max_evals=10, deadline_s=1e9, seed=0)
    with pytest.raises(CancelledError, match="after 2 probes"):
        voice_match.match_voice(engine, target, 24000, None, budget=budget, cancelled=cancelled)


@pytest.mark.slow
def test_preset_voice_matches_itself_best(engine):
    """A prompt spoken by a bundled pack: the nearest preset is that pack and similarity is high."""
    target = shifted_voice(engine, "jm_kumo", 1.0)
    result = voice_match.match_voice(engine, target, 24000, None,
                                     budget=voice_match.MatchBudget(max_evals=2, deadline_s=1e9))
    assert result.meta["nearest_preset"] == "male_1"
    assert result.meta["similarity_before"] > 0.8


@pytest.mark.slow
def test_similarity_is_a_cosine_that_separates_speakers(engine):
    a = speak(engine, HELD_OUT_TEXT, "female_1")
    b = speak(engine, "今日はいい天気ですね。", "female_1")
    c = speak(engine, "今日はいい天気ですね。", "male_1")
    same, different = similarity(a, 24000, b, 24000), similarity(a, 24000, c, 24000)
    assert -1.0 <= different < same <= 1.0
    assert same - different > 0.2
    enc = shared_encoder()
    assert abs(np.linalg.norm(enc.embed(a, 24000)) - 1.0) < 1e-4


@pytest.mark.slow
def test_stored_probe_table_matches_the_installed_model(engine):
    table = voice_match.load_probe_table(engine)
    assert set(table) == set(engine.packs) | {"preset:male_2"} | {f"check:{p}" for p in engine.presets()}
    assert table["jm_kumo"].f0 < 130 < table["jf_alpha"].f0  # the male pack speaks lower


# ---- the search's parts, without the model ----------------------------------------------------------

def test_project_keeps_weights_bounded_and_summing_to_one():
    rng = np.random.default_rng(0)
    for _ in range(500):
        w = voice_match.project(rng.normal(0, 3, 5))
        assert abs(w.sum() - 1) < 1e-6
        assert w.min() >= -voice_match.EXTRAPOLATE - 1e-9 and w.max() <= 1 + voice_match.EXTRAPOLATE + 1e-9
    np.testing.assert_allclose(voice_match.project(np.array([0.2, 0.3, 0.5])), [0.2, 0.3, 0.5])


def test_pitch_weights_bracket_the_target_in_log_f0():
    f0 = np.array([277.0, 231.0, 224.0, 314.0, 92.0])
    w = voice_match.pitch_weights(f0, 160.0)  # between jm_kumo (92) and jf_nezumi (224)
    assert w is not None and abs(w.sum() - 1) < 1e-9
    assert set(np.flatnonzero(w)) == {2, 4}
    assert np.isclose(np.exp(w[2] * np.log(224.0) + w[4] * np.log(92.0)), 160.0)
    low = voice_match.pitch_weights(f0, 60.0)  # below every pack: extrapolated, but bounded
    assert low[4] <= 1 + voice_match.EXTRAPOLATE and low[4] > 1
    assert voice_match.pitch_weights(f0, float("nan")) is None


def test_blend_pack_mixes_the_two_halves_separately():
    a, b = np.zeros((510, 1, 256), np.float32), np.ones((510, 1, 256), np.float32)
    out = voice_match.blend_pack([a, b], np.array([1.0, 0.0]), np.array([0.25, 0.75]))
    assert np.all(out[..., :128] == 0.0) and np.allclose(out[..., 128:], 0.75)


def test_artefact_penalty_prefers_clean_speechlike_audio():
    from tests.test_audio_prompt import speechlike

    clean = speechlike(2.0)
    noisy = clean + 0.05 * np.random.default_rng(0).standard_normal(clean.size).astype(np.float32)
    clipped = np.clip(clean * 20, -1, 1)
    p_clean = voice_match.artefact_penalty(clean, 24000, 2.0)
    assert p_clean < voice_match.artefact_penalty(noisy, 24000, 2.0)
    assert p_clean < voice_match.artefact_penalty(clipped, 24000, 2.0)
    assert p_clean < voice_match.artefact_penalty(clean, 24000, 4.0)  # prosody drift


def test_median_f0_of_harmonic_tones_and_noise():
    rate = 24000
    t = np.arange(2 * rate) / rate
    for f0 in (85.0, 140.0, 230.0, 320.0):
        tone = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 10)).astype(np.float32)
        assert abs(voice_match.median_f0(0.2 * tone, rate) - f0) < 0.03 * f0
    noise = np.random.default_rng(0).standard_normal(rate).astype(np.float32)
    assert np.isnan(voice_match.median_f0(noise, rate))


def test_stale_probe_table_is_ignored():
    from types import SimpleNamespace

    with np.load(voice_match.PROBE_TABLE) as npz:
        assert npz["fingerprint"].size == 64
    other = SimpleNamespace(model_id="kokoro-int8",
                            packs={"jf_alpha": np.zeros((510, 1, 256), np.float32)})
    assert voice_match.load_probe_table(other) == {}
