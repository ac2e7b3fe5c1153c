"""CosyVoice2's text tokenizer: Qwen2 byte-level BPE from ``CosyVoice-BlankEN`` plus upstream's specials.

Upstream loads the BlankEN files with ``transformers.AutoTokenizer`` and then adds 19 special tokens
(``<|endofprompt|>`` becomes 151646, the vocabulary 151663). We build the same tokenizer with the
``tokenizers`` package only: from ``tokenizer.json`` when the directory has one, otherwise from
``vocab.json`` + ``merges.txt`` with Qwen2's pre-tokenizer rules, the added tokens recorded in
``tokenizer_config.json``, then upstream's specials appended in upstream's order.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from cosyedge.errors import ModelMissingError

logger = logging.getLogger(__name__)

#: Added by upstream ``CosyVoice2Tokenizer`` (eos/pad is ``<|endoftext|>``), in this order.
COSYVOICE2_SPECIALS = (
    "<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
    "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
    "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]",
)
END_OF_TEXT = "<|endoftext|>"
END_OF_PROMPT = "<|endofprompt|>"

#: Qwen2's pre-tokenization pattern (contractions, letters, single digits, punctuation, spaces).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _qwen2_from_vocab(directory: Path):
    """A Qwen2 BPE tokenizer from ``vocab.json`` + ``merges.txt`` (what transformers builds for Qwen2)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    bpe = models.BPE.from_file(str(directory / "vocab.json"), str(directory / "merges.txt"), dropout=None,
                               unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _added_from_config(directory: Path) -> list[tuple[int, str, bool]]:
    """``(id, content, special)`` of the tokens ``tokenizer_config.json`` adds, in id order."""
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    added = data.get("added_tokens_decoder") or {}
    return sorted((int(i), t["content"], bool(t.get("special", True))) for i, t in added.items())


class TextTokenizer:
    """Text -> token ids for the CosyVoice2 LLM; special tokens in the text are recognised as such."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory: Path, specials: Sequence[str] = COSYVOICE2_SPECIALS) -> "TextTokenizer":
        """Build from a BlankEN-style directory (``tokenizer.json`` or ``vocab.json`` + ``merges.txt``);
        ``specials`` are the model version's added tokens (its version description's ``SPECIALS``)."""
        from tokenizers import AddedToken, Tokenizer

        directory = Path(directory)
        try:
            if (directory / "tokenizer.json").is_file():
                tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
            else:
                tok = _qwen2_from_vocab(directory)
                for token_id, content, special in _added_from_config(directory):
                    got = tok.token_to_id(content)
                    if got is None:
                        token = AddedToken(content, special=special, normalized=False)
                        if special:
                            tok.add_special_tokens([token])
                        else:
                            tok.add_tokens([token])
                        got = tok.token_to_id(content)
                    if got != token_id:
                        raise ValueError(f"added token {content!r} got id {got}, tokenizer_config says {token_id}")
        except Exception as exc:  # OSError, ValueError, and tokenizers' own plain Exception
            raise ModelMissingError(f"the CosyVoice tokenizer files in {directory} are missing or unreadable "
                                    f"({exc}); copy CosyVoice-BlankEN/ again with the converter") from exc
        new = [AddedToken(t, special=True, normalized=False) for t in (END_OF_TEXT, *specials)
               if tok.token_to_id(t) is None]
        if new:
            tok.add_special_tokens(new)
        return cls(tok)

    @property
    def end_of_prompt_id(self) -> int:
        return int(self.tokenizer.token_to_id(END_OF_PROMPT))

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added, as Qwen2 and upstream do)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
