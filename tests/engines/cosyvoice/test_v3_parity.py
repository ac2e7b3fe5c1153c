"""Parity of our CosyVoice3 runtime with upstream (commit in tests/data/cosyvoice3/fixture.json).

The fixture holds upstream's outputs for a tiny CosyVoice3 (tests/cosyvoice3/make_fixture.py); the
models under test are that checkpoint converted by our converter, fp32 and int8 (built by
scripts/test.sh in .venv-ref, tests/helpers/cosyvoice3_fixture.py). No upstream code runs here.

Must hold (fp32): LLM log-probs of the prefill and 20 cached steps (teacher forced) within 1e-4 and the
greedy tokens identical under upstream's own rule (id 6561 masked below the minimum length, any id
>= 6561 ends); the DiT flow mel within 1e-4; the causal HiFT audio within 1e-3 with the injected noise;
tokenizer ids exact; end to end (greedy tokens -> silent-token rule -> flow -> HiFT) within 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.v3 import version as version3
from cosyedge.engines.cosyvoice.common.instruct_format import format_instruction
from cosyedge.engines.cosyvoice.common.llm import SpeechLM
from cosyedge.engines.cosyvoice.common.manifest import ModelDir
from cosyedge.engines.cosyvoice.common.sampling import greedy
from cosyedge.engines.cosyvoice.common.tokenizer import TextTokenizer
from tests.helpers import cosyvoice3_fixture as fixture

pytestmark = pytest.mark.slow  # needs the converted fixture, built by scripts/test.sh in .venv-ref

LOGP_TOL = 1e-4
MEL_TOL = 1e-4
AUDIO_TOL = 1e-3


@pytest.fixture(scope="module")
def models(tiny_cosyvoice3_models):
    return tiny_cosyvoice3_models


@pytest.fixture(scope="module")
def ref():
    return fixture.load_reference()


@pytest.fixture(scope="module")
def calls():
    return fixture.info()["calls"]


def _lm(models, quantize="none"):
    return SpeechLM.load(models / fixture.MODEL_IDS[quantize], threads=1)


def test_fixture_is_from_upstream_v3():
    info = fixture.info()
    assert info["upstream"]["commit"].startswith("ace7c47")
    assert info["silent_tokens"] == sorted(version3.SILENT_TOKENS)


def test_llm_teacher_forced_logp(models, ref, calls):
    call = calls["llm_forced"]
    lm = _lm(models)
    embeds = lm.build_prompt(call["text"], call["prompt_text"], call["prompt_speech"])
    cache = lm.empty_cache()
    ours = []
    for token in [None] + call["forced"][:20]:
        logp, cache = lm.step(embeds if token is None else lm.embed_speech([token]), cache)
        ours.append(logp)
    expected = ref["llm_forced_logp"]
    assert expected.shape == (21, 6761)
    assert np.abs(np.stack(ours) - expected).max() < LOGP_TOL


def test_llm_greedy_tokens_follow_upstreams_stop_rule(models, calls):
    call = calls["llm_greedy"]
    lm = _lm(models)
    assert (lm.config.stop_from, lm.config.masked_id, lm.config.eos) == (6561, 6561, 6562)
    tokens = lm.generate(call["text"], greedy(lm.config.masked_id, mask_fill=False), call["prompt_text"],
                         call["prompt_speech"])
    assert tokens == call["tokens"] and len(tokens) == 20 * len(call["text"])  # upstream's max length


def test_flow_mel(models, ref):
    t2w = version3.load_token2wav(ModelDir.load(models / fixture.MODEL_IDS["none"]))
    mel = t2w.mel(ref["flow_tokens"], ref["flow_prompt_tokens"], ref["flow_prompt_mel"], ref["flow_embedding"])
    assert mel.shape == ref["flow_mel"].shape == (80, 60)
    assert np.abs(mel - ref["flow_mel"]).max() < MEL_TOL


def test_causal_hift_audio_with_injected_noise(models, ref):
    vocoder = version3.load_token2wav(ModelDir.load(models / fixture.MODEL_IDS["none"])).vocoder
    mel = ref["hift_mel"]
    np.testing.assert_allclose(vocoder.f0(mel), ref["hift_f0"], rtol=1e-6, atol=1e-4)
    audio = vocoder(mel, noise=fixture.hift_noise(mel.shape[1] * 480))
    assert audio.shape == ref["hift_audio"].shape == (40 * 480,)
    assert np.abs(audio - ref["hift_audio"]).max() < AUDIO_TOL


def test_tokenizer_ids_and_prompt_strings(models):
    info = fixture.info()["tokenizer"]
    tok = TextTokenizer.load(models / fixture.MODEL_IDS["int8"] / "tokenizer", version3.COSYVOICE3_SPECIALS)
    assert tok.vocab_size == info["vocab_size"]
    assert [tok.encode(t) for t in info["texts"]] == info["ids"]
    assert tok.end_of_prompt_id == 151646
    assert version3.zero_shot_prompt("Hi.") == "You are a helpful assistant.<|endofprompt|>Hi."
    assert version3.cross_lingual_text("Hi.") == info["texts"][0][:len("You are a helpful assistant.<|endofprompt|>")] + "Hi."
    assert format_instruction("请用四川话说这句话", 3) == info["texts"][2]


def test_end_to_end_greedy(models, ref, calls):
    call = calls["e2e"]
    model = ModelDir.load(models / fixture.MODEL_IDS["none"])
    lm = SpeechLM.load(model.path)
    tokens = lm.generate(call["text"], greedy(lm.config.masked_id, mask_fill=False), call["prompt_text"],
                         call["prompt_speech"])
    assert tokens == call["llm_tokens"]
    tokens = version3.drop_long_silences(tokens)
    t2w = version3.load_token2wav(model)
    mel = t2w.mel(tokens, ref["flow_prompt_tokens"], ref["flow_prompt_mel"], ref["flow_embedding"])
    audio = t2w.vocoder(mel, noise=fixture.hift_noise(mel.shape[1] * 480))
    assert audio.shape == ref["e2e_audio"].shape
    assert np.abs(audio - ref["e2e_audio"]).max() < AUDIO_TOL
