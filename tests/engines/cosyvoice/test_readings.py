"""The pronunciation dictionary in CosyVoice's text pass (engines/cosyvoice/common/readings.py): the
token ids the LLM receives carry an entry's reading as each version can take it, on the tiny
converted CosyVoice2 and Fun-CosyVoice3 models."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions, VoicePrompt
from cosyedge.engines.cosyvoice.common import readings
from cosyedge.engines.cosyvoice.common.llm import SpeechLM
from cosyedge.lexicon.entries import make_entry
from cosyedge.lexicon.matching import Lexicon
from tests.helpers.cosyvoice3_fixture import MODEL_IDS
from tests.helpers.tiny_engines import open_engine

BANK_PHONES = "[y][ín][h][áng]"


@pytest.fixture(scope="module")
def v3(tiny_cosyvoice3_models):
    engine = open_engine(tiny_cosyvoice3_models, MODEL_IDS["int8"])
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def v2(tiny_cosyvoice_models):
    engine = open_engine(tiny_cosyvoice_models)
    yield engine
    engine.close()


def use(engine, *entries):
    lexicon = Lexicon([make_entry(*e) for e in entries])
    engine.pronounce_with(lambda: lexicon)


def llm_inputs(engine, text, monkeypatch):
    """The text ids the LLM is given for each sentence of ``text`` (the LLM itself is not run)."""
    seen = []

    def generate(self, text_ids, *args, **kwargs):
        seen.append(list(text_ids))
        return []

    monkeypatch.setattr(SpeechLM, "generate", generate)
    voice = VoicePrompt(engine=engine.name, model_id=engine.model_id,  # a cross-lingual clone's conditioning
                        arrays={"embedding": np.zeros(192, np.float32), "tokens": np.zeros(4, np.int64),
                                "mel": np.zeros((8, 80), np.float32)})
    return seen, list(engine.synthesize(text, voice, SynthesisOptions()))


def ids_of(engine, phones):
    return engine.tokenizer.encode(phones)


def contains(haystack, needle):
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def test_cosyvoice3_reads_the_entry_as_its_phone_tokens_and_not_without_it(v3, monkeypatch):
    phones = ids_of(v3, BANK_PHONES)
    assert len(phones) == 4  # four phone tokens, one id each
    v3.pronounce_with(None)
    without, _ = llm_inputs(v3, "我去银行。", monkeypatch)
    assert not contains(without[0], phones)
    use(v3, ("zh", "银行", "yin2 hang2"))
    try:
        with_entry, chunks = llm_inputs(v3, "我去银行。", monkeypatch)
        analysis = v3.analyze("我去银行。")
    finally:
        v3.pronounce_with(None)
    assert contains(with_entry[0], phones) and not contains(with_entry[0], v3.tokenizer.encode("银行"))
    assert chunks[0].text == "我去银行。"  # the chunk (and the captions) show the text as written
    assert [n.code for n in analysis.notes] == ["reading_applied"]


def test_cosyvoice3_inline_form_wins_and_english_gets_arpabet_tokens(v3, monkeypatch):
    use(v3, ("zh", "银行", "yin2 xing2"), ("en", "Nice", "N IY1 S"))
    try:
        seen, _ = llm_inputs(v3, "他在{银行|yin2 hang2}上班。We love Nice.", monkeypatch)
    finally:
        v3.pronounce_with(None)
    joined = [i for ids in seen for i in ids]
    assert contains(joined, ids_of(v3, BANK_PHONES)) and not contains(joined, ids_of(v3, "[x][íng]"))
    assert contains(joined, ids_of(v3, "[N][IY1][S]"))


def test_cosyvoice2_spells_a_polyphone_with_an_unambiguous_homophone_and_says_what_it_cannot(v2):
    use(v2, ("zh", "银行", "yin2 hang2"), ("en", "Nice", "N IY1 S"))
    try:
        analysis = v2.analyze("我去银行。We love Nice.")
    finally:
        v2.pronounce_with(None)
    spoken = "".join(analysis.sentences)
    shown = "".join(readings.shown(s) for s in analysis.sentences)
    assert "银行" not in spoken and "银" + readings.same_sound("行", "hang2") in spoken
    assert "银行" in shown and "Nice" in spoken
    codes = {n.code: n for n in analysis.notes}
    assert codes["reading_not_supported"].params["word"] == "Nice"
    assert codes["reading_applied"].params["entries"][0]["word"] == "银行"


def test_an_entry_in_a_japanese_sentence_is_not_applied_and_noted(v3):
    use(v3, ("zh", "日本", "ri4 ben3"))
    try:
        analysis = v3.analyze("日本ですね。")
    finally:
        v3.pronounce_with(None)
    assert "[r]" not in "".join(analysis.sentences)
    assert analysis.notes[0].code == "reading_other_language"


@pytest.mark.parametrize("word, syllables, spelled", [
    ("银行", "yin2 hang2", "[y][ín][h][áng]"), ("给予", "ji3 yu3", "[j][ǐ][y][ǔ]"),
    ("绿", "lv4", "[l][ǜ]"), ("略", "lve4", "[l][vè]"), ("爱", "ai4", "[ài]"),
])
def test_cosyvoice3_phone_spelling_follows_upstreams_tokens(word, syllables, spelled):
    from cosyedge.engines.cosyvoice.v3 import version

    assert version.spell_reading(make_entry("zh", word, syllables)) == (spelled, "")


def test_a_character_whose_only_reading_is_the_entrys_is_kept():
    assert readings.same_sound("银", "yin2") == "银"
    other = readings.same_sound("行", "hang2")
    assert other != "行" and readings.character_readings()[other] == ("hang2",)
