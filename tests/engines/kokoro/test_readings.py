"""The pronunciation dictionary in Kokoro's text pass (engines/kokoro/readings.py + the frontend):
the phonemes the model receives carry an entry's reading, and only where the rules say."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.kokoro.frontend import KokoroFrontend
from cosyedge.engines.kokoro.g2p import english_reading_symbols
from cosyedge.errors import ReadingError
from cosyedge.lexicon.entries import make_entry
from cosyedge.lexicon.matching import Lexicon, LineProblem
from tests.helpers import tiny_kokoro

BANK_AS_WRITTEN = "i↗nxa↗ŋ"   # 银行 yin2 hang2 (what the G2P says too)
BANK_AS_ENTRY = "i↗nɕi↗ŋ"     # 银行 yin2 xing2: a reading no G2P would give, so it shows where it came from


@pytest.fixture(scope="module")
def frontend():
    f = KokoroFrontend()
    yield f
    f.close()


@pytest.fixture
def with_entries(frontend):
    def use(*entries):
        lexicon = Lexicon([make_entry(*e) for e in entries])
        frontend.readings = lambda: lexicon
        return frontend
    yield use
    frontend.readings = None


class Recorder:
    """Wraps a session and keeps the token ids of every call."""

    def __init__(self, session):
        self.session, self.calls = session, []
        self.output_names = [o.name for o in session.get_outputs()]

    def run(self, names, feeds):
        self.calls.append(feeds["tokens"][0, 1:-1].tolist())
        return self.session.run(names, feeds)


def received(frontend, tmp_path, text):
    """The symbols the model receives for ``text`` (the tiny model, the real frontend)."""
    engine = tiny_kokoro.engine(tmp_path, frontend)
    engine.session = Recorder(engine.session)
    list(engine.synthesize(text, "female_1", SynthesisOptions()))
    symbols = {i: s for s, i in frontend.vocab.items()}
    return ["".join(symbols[i] for i in call) for call in engine.session.calls]


def test_the_model_receives_the_readings_symbols_and_not_without_the_entry(with_entries, frontend, tmp_path):
    assert BANK_AS_ENTRY not in "".join(received(frontend, tmp_path, "我去银行。"))
    with_entries(("zh", "银行", "yin2 xing2"))
    heard = "".join(received(frontend, tmp_path, "我去银行。"))
    assert BANK_AS_ENTRY in heard and BANK_AS_WRITTEN not in heard


def test_the_inline_form_wins_over_the_dictionary_for_its_occurrence_only(with_entries):
    f = with_entries(("zh", "银行", "yin2 xing2"))
    analysis = f.analyze("他在{银行|yin2 hang2}上班，也去银行。")
    phonemes = " ".join(s.phonemes for s in analysis.sentences)
    assert phonemes.index(BANK_AS_WRITTEN) < phonemes.index(BANK_AS_ENTRY)
    assert "".join(s.text for s in analysis.sentences) == "他在银行上班，也去银行。"  # shown as written
    applied = next(n for n in analysis.notes if n.code == "reading_applied").params["entries"]
    assert {(e["reading"], e["inline"]) for e in applied} == {("yin2 hang2", True), ("yin2 xing2", False)}


def test_english_entries_ignore_case_and_full_width_and_match_whole_words(with_entries):
    f = with_entries(("en", "Nice", "N IY1 S"))
    for text in ("We went to NICE.", "We went to ｎｉｃｅ."):
        assert "nˈis" in f.sentences(text)[0].phonemes
    assert "nˈis" not in f.sentences("That was nicely done.")[0].phonemes


def test_an_entry_meeting_text_read_in_another_language_is_not_applied_and_noted(with_entries):
    f = with_entries(("zh", "日本", "ri4 ben3"))
    analysis = f.analyze("日本ですね。")  # kana: the characters are read as Japanese
    assert "ɻɨ" not in analysis.sentences[0].phonemes
    note = next(n for n in analysis.notes if n.code == "reading_other_language")
    assert note.params == {"word": "日本", "language": "zh", "read_as": "Japanese"}
    tagged = f.analyze("[ja]日本[zh]日本")  # a tag is another language too
    assert [n.code for n in tagged.notes].count("reading_applied") == 1


def test_longest_entry_first_and_japanese_kana_readings(with_entries):
    f = with_entries(("zh", "行", "xing2"), ("zh", "银行", "yin2 hang2"), ("ja", "東京", "とうきょう"))
    assert f.sentences("银行")[0].phonemes == BANK_AS_WRITTEN
    assert f.sentences("東京へ行きます。")[0].phonemes.startswith("toːkʲoː")


def test_a_bad_inline_reading_is_refused_naming_it(frontend):
    with pytest.raises(ReadingError) as caught:
        frontend.analyze("去{银行|yin2 hang9}")
    assert caught.value.params["word"] == "银行"


def test_a_damaged_dictionary_is_reported_and_the_text_still_read(frontend):
    damaged = Lexicon([make_entry("zh", "银行", "yin2 xing2")],
                      [LineProblem(3, "zh\t重庆\tchong2 qing9", "reading_tone_out_of_range", "...")])
    frontend.readings = lambda: damaged
    try:
        analysis = frontend.analyze("我去银行。")
    finally:
        frontend.readings = None
    assert BANK_AS_ENTRY in analysis.sentences[0].phonemes
    assert next(n for n in analysis.notes if n.code == "reading_book_damaged").params["lines"] == [3]


def test_words_sit_on_their_phonemes_and_an_atom_is_one_word(with_entries):
    f = with_entries(("zh", "银行", "yin2 xing2"))
    sentence = f.sentences("我去银行取钱。")[0]
    spans = {word: sentence.phonemes[a:b] for word, a, b in sentence.words}
    assert spans["银行"] == BANK_AS_ENTRY and spans["我"].startswith("wo")


@pytest.mark.parametrize("ipa, phones, symbols", [
    ("ˈniːs", (), "nˈis"), ("niːs", (), "nˈis"), ("ʃɪˈvɔːn", (), "ʃɪvˈɔn"), ("ˈbʌtn̩", (), "bˈʌtᵊn"),
    ("", ("N", "IY1", "S"), "nˈis"), ("", ("B", "AH1", "T", "AH0", "N"), "bˈʌtən"),
    ("tʃɜːtʃ", (), "ʧˈɜɹʧ"), ("", ("CH", "ER1", "CH"), "ʧˈɜɹʧ"),
])
def test_english_readings_become_kokoro_symbols(ipa, phones, symbols):
    assert english_reading_symbols(ipa, phones) == symbols


def test_every_english_ipa_symbol_a_reading_may_use_is_one_kokoro_reads(frontend):
    from cosyedge.lexicon.readings import _IPA_TO_ARPABET

    for ipa, _ in _IPA_TO_ARPABET:
        symbols = english_reading_symbols(ipa, ())
        assert set(symbols) <= set(frontend.vocab), (ipa, symbols)
