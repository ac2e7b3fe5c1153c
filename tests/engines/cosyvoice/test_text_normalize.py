"""CosyVoice2 text normalization and sentence split (upstream rules; upstream helpers as the reference)."""

from __future__ import annotations

import pytest

from cosyedge.engines.cosyvoice.common.text_normalize import (TextNormalizer, is_only_punctuation, number_to_words,
                                                       replace_blank, spell_out_numbers, split_paragraph)

pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


EN = ("The quick brown fox jumps over the lazy dog. " * 9 + "Is it? Yes! Short; tail: end")
ZH = ("今天天气很好，我们去公园散步吧。" * 7 + "真的吗？是的！好" + "“你好。”他说。")


def fake_tokenize(text: str) -> list[int]:
    return [0] * len(text.split())


@pytest.fixture(scope="module")
def upstream_utils():
    pytest.importorskip("torch", reason="reference: scripts/install_reference.sh .venv")
    from tests.helpers import cosyvoice_reference as _reference

    _reference.install_shim()
    from cosyvoice.utils import frontend_utils

    return frontend_utils


@pytest.mark.parametrize("text,zh", [(EN, False), (ZH, True), ("No punctuation at all", False),
                                     ("短句", True), ("A. B. C. " * 40, False)])
def test_split_matches_upstream(upstream_utils, text, zh):
    lang = "zh" if zh else "en"
    length = len if zh else (lambda s: len(fake_tokenize(s)))
    want = upstream_utils.split_paragraph(text, fake_tokenize, lang, token_max_n=80, token_min_n=60,
                                          merge_len=20, comma_split=False)
    assert split_paragraph(text, length, zh=zh) == want


@pytest.mark.parametrize("text", ["你好 世界", "hello world", "中 a b 文", "a  b", "数字 12 和 ab cd"])
def test_replace_blank_matches_upstream(upstream_utils, text):
    assert replace_blank(text) == upstream_utils.replace_blank(text)


def test_replace_blank_at_the_edges():
    """Upstream indexes past the end on a trailing blank; ours treats the outside as a blank."""
    assert replace_blank(" x ") == "x"


@pytest.mark.parametrize("text", ["", "。", "...!?", "，、", "a.", "你好", "—— ——"])
def test_only_punctuation_matches_upstream(upstream_utils, text):
    assert is_only_punctuation(text) == upstream_utils.is_only_punctuation(text)


def test_number_words():
    assert number_to_words(0) == "zero"
    assert number_to_words(21) == "twenty-one"
    assert number_to_words(120) == "one hundred and twenty"
    assert number_to_words(2024) == "two thousand and twenty-four"
    assert number_to_words(1_234_567) == "one million, two hundred and thirty-four thousand, five hundred and sixty-seven"
    assert spell_out_numbers("room 7b, floor 12") == "room sevenb, floor twelve"


def test_normalizer_splits_and_normalizes_with_wetext():
    pytest.importorskip("wetext")
    norm = TextNormalizer(fake_tokenize)
    zh = norm.split("今天是2024年3月5日（星期二），气温3.5度、")
    assert zh and all("2024" not in s and "（" not in s for s in zh)
    assert zh[-1].endswith("。")
    en = norm.split("I paid $120 on March 5. Then I left!")
    assert en and not any(ch.isdigit() for s in en for ch in s)
    assert norm.split("") == [] and norm.split("。！？") == []
    markup = "用四川话说<|endofprompt|>你好123"
    assert norm.split(markup) == [markup]
    assert norm.split("こんにちは。元気ですか？") == ["こんにちは。元気ですか？"]


def test_normalizer_without_wetext_still_spells_numbers():
    norm = TextNormalizer(fake_tokenize, use_wetext=False)
    assert norm.split("I have 3 cats.") == ["I have three cats."]
