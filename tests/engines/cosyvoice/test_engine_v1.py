"""The CosyVoice-300M engine on the tiny converted base, SFT and Instruct models (random weights).

What each mode feeds the LLM and the flow is checked against upstream ``cosyvoice/cli/frontend.py`` at
FunAudioLLM/CosyVoice 46dfe04 (the reference package's frontend is not upstream's):

* ``frontend_sft``: ``llm_embedding`` and ``flow_embedding`` are both ``spk2info[spk_id]['embedding']``,
  no prompt text or speech;
* ``frontend_instruct``: the SFT input without ``llm_embedding``, and ``prompt_text`` = the tokens of
  ``instruct_text + '<endofprompt>'``; :data:`INSTRUCT_IDS` are those tokens for :data:`INSTRUCT`, read
  with upstream's tokenizer (whisper ``get_tokenizer(multilingual=True, num_languages=100)``,
  ``allowed_special='all'``) and committed here;
* ``frontend_zero_shot`` / ``frontend_cross_lingual``: the prompt's embedding for both, its tokens
  and mel for the flow; cross-lingual drops the LLM's prompt text and speech.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.loader import load_engine
from cosyedge.errors import ParameterError

# Every test here loads the tiny converted models that scripts/test.sh builds first.
pytestmark = pytest.mark.slow

INSTRUCT = "Theo 'Crimson', is a fiery, passionate rebel leader."
INSTRUCT_IDS = [2278, 78, 922, 34, 5565, 3015, 6098, 307, 257, 43897, 11, 11410, 28293, 5263, 13, 27, 521, 2670,
                28722, 662, 29]
SPEAKERS = ["中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女"]


@pytest.fixture(scope="module")
def engines(tiny_cosyvoice_models):
    loaded = {name: load_engine(Settings(models_dir=tiny_cosyvoice_models, model=f"cosyvoice1-{name}tiny",
                                         onnx_threads=1))
              for name in ("", "sft-", "instruct-")}
    yield {"base": loaded[""], "sft": loaded["sft-"], "instruct": loaded["instruct-"]}
    for engine in loaded.values():
        engine.close()


def _prompt(engine, transcript):
    t = np.arange(3 * 16000) / 16000
    return engine.encode_prompt((0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 16000, transcript)


def test_presets_are_the_sft_speakers_and_the_seed_names_that_map(engines):
    sft = engines["sft"]
    assert sft.name == "cosyvoice1" and sft.capabilities.sample_rate == 22050
    assert sft.presets() == SPEAKERS + ["female_1", "female_2", "male_1", "male_2"]
    details = {d.name: d for d in sft.capabilities.preset_details}
    assert details["female_1"].made_of["zh"] == {"speaker": "中文女"}
    assert details["male_2"].made_of["en"] == {"speaker": "英文男"}
    assert details["日语男"].made_of["ja"] == {"speaker": "日语男"}
    assert details["child"].made_of == {} and "no child speaker" in details["child"].note
    assert "child" not in sft.presets()
    assert engines["base"].presets() == [] and engines["base"].capabilities.preset_details == ()
    assert [e.capabilities.native_instruct for e in engines.values()] == [False, False, True]
    from cosyedge.catalog.abilities import NATIVE_ABILITIES  # before a load the page says what base/SFT do
    assert NATIVE_ABILITIES["cosyvoice1"] == (sft.capabilities.native_clone, sft.capabilities.native_instruct)


def test_sft_lookup_matches_upstream_frontend_sft(engines):
    sft = engines["sft"]
    cond = sft.conditioning("英文女", None)
    assert cond["mode"] == "sft" and cond["prompt_text"] == [] and cond["prompt_speech"] == []
    assert cond["llm_embedding"] is cond["flow_embedding"]
    assert cond["flow_tokens"].size == 0 and cond["flow_mel"].shape == (0, 80)
    alias = sft.conditioning("female_2", None)
    assert np.array_equal(alias["flow_embedding"], cond["flow_embedding"])
    assert not np.array_equal(sft.conditioning("中文男", None)["flow_embedding"], cond["flow_embedding"])
    assert sft.conditioning(None, None)["flow_embedding"] is sft.conditioning(SPEAKERS[0], None)["flow_embedding"]


def test_instruct_text_matches_upstream_frontend_instruct(engines):
    instruct = engines["instruct"]
    formatted = instruct.format_instruction(INSTRUCT)
    assert formatted == INSTRUCT + "<endofprompt>"
    cond = instruct.conditioning("中文男", formatted)
    assert cond["mode"] == "instruct" and cond["prompt_text"] == INSTRUCT_IDS
    assert cond["llm_embedding"] is None  # upstream: del model_input['llm_embedding']
    assert np.array_equal(cond["flow_embedding"], instruct.conditioning("中文男", None)["flow_embedding"])


def test_clone_modes_feed_the_prompt_as_upstream(engines):
    engine = engines["base"]
    zero_shot = engine.conditioning(_prompt(engine, "希望你以后能够做的比我还好呦。"), None)
    assert zero_shot["mode"] == "zero_shot" and zero_shot["prompt_text"] and zero_shot["prompt_speech"]
    assert zero_shot["llm_embedding"] is zero_shot["flow_embedding"]
    assert zero_shot["flow_mel"].shape[0] > zero_shot["flow_tokens"].size  # v1 keeps the whole prompt mel
    cross = engine.conditioning(_prompt(engine, None), None)
    assert cross["mode"] == "cross_lingual" and cross["prompt_text"] == [] and cross["prompt_speech"] == []
    assert cross["flow_tokens"].size > 0


def test_missing_modes_are_refused_naming_mode_and_model(engines):
    with pytest.raises(ParameterError) as sft_on_base:
        engines["base"].conditioning("中文女", None)
    assert sft_on_base.value.code == "mode_not_supported" and sft_on_base.value.params["mode"] == "sft"
    assert "CosyVoice-300M (cosyvoice1-tiny)" in str(sft_on_base.value)
    with pytest.raises(ParameterError) as instruct_on_sft:
        engines["sft"].conditioning("中文女", "slowly<endofprompt>")
    assert instruct_on_sft.value.params == {"mode": "instruct", "model": "cosyvoice1-sft-tiny",
                                            "model_name": "CosyVoice-300M-SFT"}
    voice = _prompt(engines["instruct"], "hello")
    with pytest.raises(ParameterError, match="instruct mode") as clone_with_instruction:
        engines["instruct"].conditioning(voice, "slowly<endofprompt>")
    assert clone_with_instruction.value.code == "mode_not_supported"


@pytest.mark.parametrize("voice,instruct", [("中文女", None), ("male_1", INSTRUCT), ("zero_shot", None),
                                            ("cross_lingual", None)])
def test_every_mode_synthesizes_22khz_audio(engines, voice, instruct):
    engine = engines["instruct"]
    if voice in ("zero_shot", "cross_lingual"):
        voice = _prompt(engine, "测试一下。" if voice == "zero_shot" else None)
    formatted = engine.format_instruction(instruct) if instruct else None
    chunks = list(engine.synthesize("你好，世界。Hello there.", voice, SynthesisOptions(seed=3, instruct=formatted)))
    assert chunks and all(c.sample_rate == 22050 for c in chunks)
    audio = np.concatenate([c.audio for c in chunks])
    assert audio.size % 256 == 0 and 0.05 < audio.size / 22050 < 30 and np.isfinite(audio).all()


def test_the_page_offers_the_sft_speakers_once_the_model_loaded(tiny_cosyvoice_models, tmp_path):
    from cosyedge.service.facade import Service
    from cosyedge.service.requests import TTSRequest
    from cosyedge.web.ui import voice_choices

    service = Service(Settings(models_dir=tiny_cosyvoice_models, model="cosyvoice1-sft-tiny", onnx_threads=1,
                               outputs_dir=tmp_path / "out", prompts_dir=tmp_path / "prompts"))
    try:
        job = service.submit(TTSRequest(text="你好。", speaker="female_1"))
        assert job.wait(120) and job.error is None, job.error
        assert [value for _, value in voice_choices(service)][:7] == SPEAKERS
        assert service.voices()["native_instruct"] is False
    finally:
        service.close()


def test_an_instruction_to_a_model_without_instruct_mode_says_it_became_app_controls(tiny_cosyvoice_models,
                                                                                    tmp_path):
    """The SFT model reads an instruction as the embedded engine does (app controls, not refused) and
    its answer's notes say why, with a code; the Instruct model's answer has no such note."""
    from cosyedge.service.facade import Service, TTSRequest

    results = {}
    for model in ("cosyvoice1-sft-tiny", "cosyvoice1-instruct-tiny"):
        service = Service(Settings(models_dir=tiny_cosyvoice_models, model=model, onnx_threads=1,
                                   outputs_dir=tmp_path / model, prompts_dir=tmp_path / "prompts"))
        try:
            job = service.submit(TTSRequest(text="你好。", speaker="中文女", instruct="read it slowly"))
            assert job.wait(120) and job.error is None, job.error
            results[model] = job.result
        finally:
            service.close()
    sft = results["cosyvoice1-sft-tiny"]
    notes = [n for n in sft.notes if getattr(n, "code", None) == "instruct_as_controls"]
    assert len(notes) == 1 and notes[0].params == {"mode": "instruct", "model": "cosyvoice1-sft-tiny",
                                                   "model_name": "CosyVoice-300M-SFT"}
    assert "app controls" in notes[0] and sft.instruct["controls"]["speed"] < 1.0  # the controls did apply
    instruct = results["cosyvoice1-instruct-tiny"]
    assert instruct.instruct["controls"]["native"] is True
    assert not any(getattr(n, "code", None) == "instruct_as_controls" for n in instruct.notes)
