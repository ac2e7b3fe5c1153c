"""Preset recipes per language (engines/kokoro/presets.py) and the engine reading each sentence with
its language's recipe, on the tiny generated model."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions, TextAnalysis, VoicePrompt
from cosyedge.engines.kokoro import presets
from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.engines.kokoro.presets import PRESETS, Recipe
from tests.helpers import tiny_kokoro
from tests.helpers.tiny_kokoro import PACKS, Sentence



class TaggedFrontend:
    """'zh:abc|en:def': one sentence per '|' piece, in the language before its colon."""

    def sentences(self, text: str, language: str = "auto") -> list[Sentence]:
        out = []
        for piece in text.split("|"):
            lang, body = piece.split(":", 1)
            out.append(Sentence(body, body, lang))
        return out

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        return TextAnalysis(text=text, language=language, sentences=tuple(self.sentences(text)))

    def token_ids(self, phonemes: str) -> list[int]:
        return [1 + (ord(c) % 100) for c in phonemes]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> KokoroEngine:
    return tiny_kokoro.engine(tmp_path_factory.mktemp("tiny"), TaggedFrontend(), seed=1)


def chunks(engine, text, voice):
    return [c.audio for c in engine.synthesize(text, voice, SynthesisOptions())]


def test_every_recipe_is_a_valid_blend_of_bundled_packs():
    for name in PRESETS:
        for language in presets.PACK_LANGUAGES:
            made = presets.recipe(name, language)
            for half in (made.timbre, made.prosody):
                assert set(half) <= set(PACKS), (name, language)
                assert sum(half.values()) == pytest.approx(1.0), (name, language)


def test_a_recipe_keeps_one_packs_timbre_and_another_blends_prosody():
    rng = np.random.default_rng(2)
    packs = {name: rng.normal(size=(510, 1, 256)).astype(np.float32) for name in PACKS}
    made = Recipe({"jf_alpha": 1.0}, {"jf_alpha": 0.5, "jf_nezumi": 0.5})
    pack = presets.build(packs, made)
    np.testing.assert_allclose(pack[..., :128], packs["jf_alpha"][..., :128])
    np.testing.assert_allclose(pack[..., 128:], 0.5 * (packs["jf_alpha"] + packs["jf_nezumi"])[..., 128:], rtol=1e-5)
    assert made.made_of() == {"timbre": {"jf_alpha": 1.0}, "prosody": {"jf_alpha": 0.5, "jf_nezumi": 0.5}}
    assert Recipe.whole({"jm_kumo": 1.0}).made_of() == {"packs": {"jm_kumo": 1.0}}


def test_preset_details_list_each_languages_recipe(monkeypatch):
    made = Recipe({"jf_alpha": 1.0}, {"jf_nezumi": 1.0})
    monkeypatch.setattr(presets, "LANGUAGE_RECIPES", {"female_1": {"zh": made}})
    details = {d.name: d.made_of for d in presets.preset_details()}
    assert list(details) == list(PRESETS)
    assert details["female_1"]["zh"] == made.made_of()
    assert details["female_1"]["en"] == {"packs": {"jf_alpha": 1.0}}
    assert details["male_2"]["ja"] == {"packs": {"jm_kumo": 0.8, "jf_gongitsune": 0.2}}


def test_the_engine_reads_each_sentence_with_its_languages_recipe(engine, monkeypatch):
    made = Recipe({"jf_alpha": 1.0}, {"jf_nezumi": 1.0})
    monkeypatch.setattr(presets, "LANGUAGE_RECIPES", {})
    own = chunks(engine, "zh:abcdef|en:ghijkl", "female_1")
    monkeypatch.setattr(presets, "LANGUAGE_RECIPES", {"female_1": {"zh": made}})
    mixed = chunks(engine, "zh:abcdef|en:ghijkl", "female_1")
    borrowed = VoicePrompt(engine="kokoro", model_id=engine.model_id,
                           arrays={"style": presets.build(engine.packs, made)})
    np.testing.assert_array_equal(mixed[0], chunks(engine, "zh:abcdef", borrowed)[0])  # zh: the recipe
    assert not np.array_equal(mixed[0], own[0])
    np.testing.assert_array_equal(mixed[1], own[1])  # en: the preset's own blend, as before
    # a raw pack name or an encoded voice reads every language alike
    assert np.array_equal(chunks(engine, "zh:abcdef", "jf_alpha")[0], own[0])
