"""Kokoro G2P per language: exact phoneme strings, vocabulary filtering, espeak IPA mapping."""

import pytest

from cosyedge.engines.kokoro.frontend import load_vocab
from cosyedge.engines.kokoro.g2p import ChineseG2P, KokoroG2P, espeak_to_kokoro


@pytest.fixture(scope="module")
def vocab():
    return load_vocab()


@pytest.fixture(scope="module")
def g2p(vocab):
    g = KokoroG2P(vocab)
    yield g
    g.close()


def test_vocab_is_kokoro_v1(vocab):
    assert len(vocab) == 114
    assert vocab[" "] == 16 and vocab["ꭧ"] == 23 and vocab["↓"] == 169
    assert 0 not in vocab.values()  # 0 is the padding id


# Tones: → 1, ↗ 2, ↓ 3, ↘ 4, no arrow for neutral; words joined by spaces (misaki legacy).
@pytest.mark.parametrize("text, phonemes", [
    ("你好", "ni↗xau↓"),                      # ni3 hao3 -> ni2 hao3
    ("老鼠", "lau↗ʂu↓"),                      # lao3 shu3 -> lao2 shu3 (pypinyin's sandhi misses this)
    ("一个", "i↗kɤ↘"),                        # yi1 ge4 -> yi2 ge4
    ("不是", "pu↗ʂɨ↘"),                       # bu4 shi4 -> bu2 shi4
    ("展览馆", "ꭧa↗nla↗nkwa↓n"),              # 3-3-3 -> 2-2-3
    ("我很好", "wo↗ xə↗n xau↓"),
    ("老保管", "lau↓ pau↗kwa↓n"),             # 1+2 words: 3 2 3
    ("一天", "i↘tʰjɛ→n"),
    ("我不知道", "wo↓ pu↘ ꭧɨ→tau↘"),
    ("二零二四年", "ɚ↘li↗ŋɚ↘ sɨ↘njɛ↗n"),
    ("今天天气真好", "ʨi→ntʰjɛ→ntʰjɛ→nʨʰi↘ ꭧə→n xau↓"),
    ("儿子", "ɚ↗ʦɨ"),                          # neutral tone: no arrow
])
def test_chinese(g2p, text, phonemes):
    assert g2p.phonemize(text, "zh") == phonemes


def test_chinese_without_han_gives_nothing():
    assert ChineseG2P()("  ") == ""


@pytest.mark.parametrize("text, phonemes", [
    ("Hello world", "həlˈO wˈɜɹld"),
    ("It's sunny today", "ɪts sˈʌni tədˈA"),
    ("Python", "pˈIθən"),
    ("the church judge", "ðə ʧˈɜɹʧ ʤˈʌʤ"),
    ("go home now boy", "ɡˌO hˈOm nˈW bˈY"),
    ("water little button", "wˈɔTəɹ lˈɪTᵊl bˈʌtn"),
])
def test_english(g2p, text, phonemes):
    assert g2p.phonemize(text, "en") == phonemes


@pytest.mark.parametrize("text, phonemes", [
    ("こんにちは世界", "koɲɲiʨiβa sekai"),
    ("今日は良い天気ですね", "kʲoː βa joi teŋkʲi desɨ ne"),
])
def test_japanese(g2p, text, phonemes):
    assert g2p.phonemize(text, "ja") == phonemes


@pytest.mark.parametrize("ipa, kokoro", [
    ("həlˈo^ʊ wˈɜːld", "həlˈO wˈɜɹld"),
    ("pˈa^ɪθən nˈa^ʊ bˈɔ^ɪ tədˈe^ɪ", "pˈIθən nˈW bˈY tədˈA"),
    ("t^ʃˈɜːt^ʃ d^ʒˈʌd^ʒ", "ʧˈɜɹʧ ʤˈʌʤ"),
    ("lˈɪɾə^l bˈʌʔn̩", "lˈɪTᵊl bˈʌtn"),
    ("wˈɔːɾɚ", "wˈɔTəɹ"),
    ("bˈɪɹ nˈɪə", "bˈɪɹ nˈiə"),
    ("ɹˈɛd rˈɛd", "ɹˈɛd ɹˈɛd"),
    ("lˈɪsn̩", "lˈɪsᵊn"),
    ("dˈʊ^ɹɹɪŋ kɚɹˈɪ^ɹ", "dˈʊɹɪŋ kəɹˈɪɹ"),
])
def test_espeak_to_kokoro_us(ipa, kokoro):
    assert espeak_to_kokoro(ipa) == kokoro


def test_espeak_to_kokoro_gb_keeps_length_and_uses_q():
    assert espeak_to_kokoro("ɡˈə^ʊ bˈɜːd", british=True) == "ɡˈQ bˈɜːd"


def test_output_symbols_are_all_in_vocab(g2p, vocab):
    for text, lang in (("你好世界，一百二十三", "zh"), ("The quick brown fox jumps", "en"),
                       ("東京タワーは高い", "ja")):
        assert set(g2p.phonemize(text, lang)) <= set(vocab)


def test_symbols_outside_the_vocab_are_dropped(vocab):
    small = {k: v for k, v in vocab.items() if k not in "↗↓"}
    g = KokoroG2P(small)
    try:
        assert g.phonemize("你好", "zh") == "nixau"
    finally:
        g.close()


def test_a_failing_g2p_library_costs_the_text_not_the_request(vocab, caplog):
    def broken(text):
        raise RuntimeError("library bug")

    g = KokoroG2P(vocab, g2p={"ja": broken})
    try:
        assert g.phonemize("東京", "ja") == ""
        assert "ja G2P failed" in caplog.text
        assert g.phonemize("你好", "zh") == "ni↗xau↓"
    finally:
        g.close()
