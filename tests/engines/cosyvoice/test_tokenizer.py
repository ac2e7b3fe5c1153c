"""The CosyVoice2 text tokenizer (``tokenizers`` only) against upstream's recipe (transformers)."""

from __future__ import annotations

import json

import pytest

from cosyedge.engines.cosyvoice.common.tokenizer import COSYVOICE2_SPECIALS, TextTokenizer
from cosyedge.errors import ModelMissingError
from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


SAMPLES = [
    "Hello world, this is a tiny tokenizer for tests.",
    "你好，世界。今天天气很好！",
    "用四川话说这句话<|endofprompt|>今天天气很好。",
    "A [breath] pause, then <laughter>a laugh</laughter> and [laughter].",
    "Numbers 12345 and  double  spaces\nnew lines\n\n end",
    "<|im_start|>user<|im_end|> unknown words: zyxwvut, ÄÖÜ ß, 😀",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_tokenizer(tmp_path_factory.mktemp("blanken"))


@pytest.fixture(scope="module")
def upstream(tiny_dir):
    """Upstream's recipe: ``AutoTokenizer.from_pretrained(BlankEN)`` + ``add_special_tokens`` of its list."""
    transformers = pytest.importorskip("transformers", reason="reference: scripts/install_reference.sh .venv")
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_dir))
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                            "additional_special_tokens": list(COSYVOICE2_SPECIALS)})
    return tok


def test_special_ids_match_upstream_layout(tiny_dir):
    tok = TextTokenizer.load(tiny_dir)
    assert tok.end_of_prompt_id == 151646
    assert tok.vocab_size == 151663  # upstream's ORIGINAL_VOCAB_SIZE
    assert tok.encode("<|endofprompt|>") == [151646]
    assert tok.encode("[breath]") == [151647]
    assert tok.encode("[mn]") == [151662]


@pytest.mark.parametrize("text", SAMPLES)
def test_ids_equal_upstream_transformers_tokenizer(tiny_dir, upstream, text):
    ours = TextTokenizer.load(tiny_dir)
    assert ours.encode(text) == upstream([text])["input_ids"][0]
    assert ours.decode(ours.encode(text)) == upstream.decode(upstream([text])["input_ids"][0],
                                                             skip_special_tokens=True)


def test_tokenizer_json_path_gives_the_same_ids(tiny_dir, tmp_path):
    """A directory with a ready ``tokenizer.json`` (as Qwen2.5 repos ship) loads through that file."""
    ours = TextTokenizer.load(tiny_dir)
    (tmp_path / "tokenizer.json").write_text(ours.tokenizer.to_str(), encoding="utf-8")
    again = TextTokenizer.load(tmp_path)
    for text in SAMPLES:
        assert again.encode(text) == ours.encode(text)


def test_missing_or_inconsistent_files_say_what_to_do(tiny_dir, tmp_path):
    with pytest.raises(ModelMissingError, match="tokenizer"):
        TextTokenizer.load(tmp_path)
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((tiny_dir / name).read_bytes())
    config = json.loads((tiny_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {"5": {"content": "<|im_start|>", "special": True}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelMissingError, match="im_start"):
        TextTokenizer.load(tmp_path)
