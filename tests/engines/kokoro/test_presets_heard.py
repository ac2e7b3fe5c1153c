"""The preset mapping against the committed intelligibility check (bench/intelligibility_results.json),
on the real Kokoro model and the real offline recognizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosyedge.listening import intelligibility
from cosyedge.service import synthesis
from cosyedge.engines.base import SynthesisOptions, VoicePrompt
from cosyedge.engines.kokoro import presets
from tests.helpers import REPO

pytestmark = pytest.mark.slow



def committed(name: str) -> dict:
    return json.loads((REPO / "bench" / name).read_text(encoding="utf-8"))


def speak(engine, text, voice, language):
    return synthesis.synthesize(engine, text, voice, SynthesisOptions(language=language), max_chars=10_000)


def test_the_presets_are_the_recipes_the_check_measured():
    after = committed("intelligibility_results.json")["after"]
    assert list(after) == presets.preset_names()
    for name in presets.preset_names():
        for language in presets.PACK_LANGUAGES:
            assert presets.recipe(name, language).made_of() == after[name][language]["made_of"], (name, language)


def test_the_engine_reads_each_language_with_the_measured_recipe(kokoro_engine):
    """A preset by name sounds exactly like the recipe the check scored, in each language."""
    lines = {"zh": "请把课本翻到第二十五页。", "en": "Raise your hand.", "ja": "春になると、桜の花が咲きます。"}
    for name in presets.preset_names():
        for language, text in lines.items():
            made = VoicePrompt(engine=kokoro_engine.name, model_id=kokoro_engine.model_id,
                               arrays={"style": presets.build(kokoro_engine.packs, presets.recipe(name, language))})
            np.testing.assert_array_equal(speak(kokoro_engine, text, name, language).audio,
                                          speak(kokoro_engine, text, made, language).audio, err_msg=f"{name} {language}")


def test_the_worst_preset_still_reads_as_the_committed_figure_says(kokoro_engine):
    """Heard again: the (preset, language) with the highest error rate on the report half."""
    from cosyedge.listening.asr import Recognizer

    results = committed("intelligibility_results.json")
    after = results["after"]
    name, language = max(((p, lang) for p in after for lang in presets.PACK_LANGUAGES),
                         key=lambda k: after[k[0]][k[1]]["report"])
    recognizer = Recognizer(threads=2, idle_seconds=0)
    total = intelligibility.Score(0, 0)
    for s in committed("intelligibility_sentences.json")["sentences"]:
        if s["language"] == language and s["half"] == "report":
            out = speak(kokoro_engine, s["text"], name, language)
            heard = recognizer.transcribe(out.audio, out.sample_rate, language, beam_size=results["measured"]["after"]["beam"])
            total += intelligibility.score(s["text"], heard.text, language)
    recognizer.release()
    assert total.rate == pytest.approx(after[name][language]["report"], abs=0.03), (name, language)
