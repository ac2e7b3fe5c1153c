"""CosyVoice-300M's text tokenizer: whisper's multilingual tiktoken vocabulary, read without tiktoken.

The converter copies ``multilingual.tiktoken`` (one ``base64(token) rank`` per line) from the
openai-whisper package and writes ``tokenizer.json`` beside it: the file's sha256, the pre-tokenization
pattern and the special tokens in id order (after the ordinary ranks). Encoding follows tiktoken's
rules with ``allowed_special='all'`` (upstream's setting): special tokens written in the text become
their ids; every other stretch is split by the pattern and each piece is byte-pair merged, always the
adjacent pair of lowest rank first.

Our own reader instead of the ``tiktoken`` package: the run time gains no compiled dependency, and
texts are one sentence at a time (tens of pieces), where the Python merge loop is well under a
millisecond per sentence (docs/bench-log/cosyvoice1.md, "CosyVoice-300M"). The tests compare the ids with
upstream's whisper tokenizer, specials included.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Sequence

from cosyedge.errors import ModelMissingError
from cosyedge.catalog.manifest import sha256_file

logger = logging.getLogger(__name__)

SPEC_FILE = "tokenizer.json"


class TiktokenBPE:
    """Byte-level BPE over a tiktoken rank table, with special tokens recognised in the text."""

    def __init__(self, ranks: dict[bytes, int], pattern: str, specials: dict[str, int]) -> None:
        import regex

        self.ranks = ranks
        self.specials = specials
        self._decoder = {rank: token for token, rank in ranks.items()}
        self._pieces = regex.compile(pattern)
        # Longest first, so that one special that is a prefix of another cannot shadow it.
        names = sorted(specials, key=len, reverse=True)
        self._special = regex.compile("|".join(regex.escape(name) for name in names)) if names else None

    @classmethod
    def load(cls, directory: Path, verify: bool = True) -> "TiktokenBPE":
        """Read ``tokenizer.json`` and its vocabulary in ``directory`` (its sha256 checked with ``verify``)."""
        directory = Path(directory)
        try:
            spec = json.loads((directory / SPEC_FILE).read_text(encoding="utf-8"))
            vocab = directory / spec["vocabulary"]
            if verify and sha256_file(vocab) != spec["sha256"]:
                raise ValueError(f"{vocab.name} does not match its sha256")
            ranks = {}
            for line in vocab.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            first = int(spec["first_special"])
            specials = {name: first + i for i, name in enumerate(spec["specials"])}
            return cls(ranks, spec["pattern"], specials)
        except (OSError, KeyError, ValueError) as exc:
            raise ModelMissingError(f"the CosyVoice-300M tokenizer in {directory} is missing or damaged ({exc}); "
                                    "convert the checkpoint again with `python -m cosyedge convert cosyvoice1`") from exc

    @property
    def vocab_size(self) -> int:
        return len(self.ranks) + len(self.specials)

    def _merge(self, piece: bytes) -> list[int]:
        if piece in self.ranks:
            return [self.ranks[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, best_rank = -1, None
            for i in range(len(parts) - 1):
                rank = self.ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = i, rank
            if best < 0:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.ranks[p] for p in parts]

    def _encode_ordinary(self, text: str, out: list[int]) -> None:
        for match in self._pieces.finditer(text):
            out.extend(self._merge(match.group().encode("utf-8")))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens in it are recognised (``allowed_special='all'``)."""
        ids: list[int] = []
        start = 0
        if self._special is not None:
            for match in self._special.finditer(text):
                self._encode_ordinary(text[start:match.start()], ids)
                ids.append(self.specials[match.group()])
                start = match.end()
        self._encode_ordinary(text[start:], ids)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ordinary ids (special tokens are skipped)."""
        return b"".join(self._decoder[i] for i in ids if i in self._decoder).decode("utf-8", errors="replace")
