"""Test-only: a tiny Qwen2-style tokenizer directory laid out like ``CosyVoice-BlankEN``.

A byte-level BPE is trained on a few sentences, then its ``vocab.json`` is padded with unreachable
entries up to Qwen2's 151643 ids, so that ``<|endoftext|>``/``<|im_start|>``/``<|im_end|>`` sit at
151643-151645 (declared in ``tokenizer_config.json`` as in the real files) and upstream's added
specials land where they do for the real model (``<|endofprompt|>`` = 151646).
"""

from __future__ import annotations

import json
from pathlib import Path

QWEN2_BASE_VOCAB = 151643
CORPUS = [
    "Hello world, this is a tiny tokenizer for tests.", "The quick brown fox jumps over the lazy dog.",
    "你好，世界。今天天气很好，我们去公园散步吧！", "用四川话说这句话", "I paid 120 dollars on March 5th, 2024.",
    "Read this slowly and warmly, please.", "speech synthesis on a small edge box",
]


def write_tiny_tokenizer(directory: Path, vocab_size: int = 600) -> Path:
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    from cosyedge.engines.cosyvoice.common.tokenizer import QWEN2_PATTERN

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    for i in range(len(vocab), QWEN2_BASE_VOCAB):
        vocab[f"<unreachable_{i}>"] = i
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    added = {str(QWEN2_BASE_VOCAB + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": True}
             for i, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])}
    config = {"added_tokens_decoder": added, "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
              "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "errors": "replace", "model_max_length": 32768, "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None, "clean_up_tokenization_spaces": False}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return directory
