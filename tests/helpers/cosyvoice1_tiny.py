"""Test-only: tiny CosyVoice-300M checkpoints (base, SFT, Instruct) in the official layout, converted.

One set of shrunken random upstream modules (:mod:`tests.helpers.cosyvoice1_reference`, the LLM's
end-of-speech logit raised by :data:`EOS_BIAS` so runs stop soon after the minimum length) is written
three times: ``CosyVoice-300M`` (no presets), ``CosyVoice-300M-SFT`` and ``CosyVoice-300M-Instruct``
(both with the seven SFT speaker names). :func:`convert_all` converts each with int8 into a
``models/`` folder; the tiny-model cache (:mod:`tests.helpers.cosyvoice_tiny`, ``build_cache``) calls
it, so `.venv` tests find them next to ``cosyvoice2-tiny`` (:data:`MODEL_IDS`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import cosyvoice1_reference as reference

EOS_BIAS = 4.0
#: Directory name of the official download -> model id of the converted tiny model.
MODEL_IDS = {"CosyVoice-300M": "cosyvoice1-tiny", "CosyVoice-300M-SFT": "cosyvoice1-sft-tiny",
             "CosyVoice-300M-Instruct": "cosyvoice1-instruct-tiny"}


def write_checkpoints(root: Path) -> dict[str, Path]:
    """The three official-layout directories under ``root`` (same weights); name -> path."""
    root = Path(root)
    base = reference.write_checkpoint(root / "CosyVoice-300M", llm=reference.build_llm(eos_bias=EOS_BIAS))
    dirs = {"CosyVoice-300M": base}
    for name in ("CosyVoice-300M-SFT", "CosyVoice-300M-Instruct"):
        shutil.copytree(base, root / name)
        _write_speakers(root / name)
        dirs[name] = root / name
    return dirs


def _write_speakers(directory: Path) -> None:
    import torch

    gen = torch.Generator().manual_seed(3)
    torch.save({name: {"embedding": torch.randn(1, 192, generator=gen)} for name in reference.SFT_SPEAKERS},
               directory / "spk2info.pt")


def convert_all(work: Path, models: Path) -> dict[str, Path]:
    """Write the checkpoints under ``work`` and convert each (int8) into ``models/<model id>``."""
    from cosyedge.export.cosyvoice.v1.convert import convert

    out = {}
    for name, src in write_checkpoints(Path(work)).items():
        out[MODEL_IDS[name]] = Path(models) / MODEL_IDS[name]
        convert(src, out[MODEL_IDS[name]], quantize="int8")
    return out
