"""Test-only: the committed CosyVoice3 parity fixture (``tests/data/cosyvoice3/``) and what it builds.

The fixture was made from upstream's own classes by ``tests/cosyvoice3/make_fixture.py`` (the json
names the upstream commit and the calls). Using it needs no upstream code:

* :func:`load_reference` / :func:`info` - upstream's outputs and the calls that produced them;
* :func:`write_official_dir` (torch, so ``.venv-ref``) - a tiny Fun-CosyVoice3 directory in the official
  layout: ``cosyvoice3.yaml``, ``llm.pt``, ``flow.pt``, ``hift.pt``, ``CosyVoice-BlankEN/`` (config and the
  tiny tokenizer), stand-ins for ``campplus.onnx`` / ``speech_tokenizer_v3.onnx``;
* ``python -m tests.helpers.cosyvoice3_fixture --out DIR`` - that directory converted with int8 and
  fp32 into ``DIR/models/`` (scripts/test.sh builds it for the `.venv` tests; rebuilt when the
  fixture or the converter sources change, see :func:`stale_reason`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from tests.helpers import REPO, tiny_models

DATA = REPO / "tests" / "data" / "cosyvoice3"
DEFAULT_OUT = REPO / "test-artifacts" / "tiny-models-v3"
MODEL_IDS = {"int8": "cosyvoice3-tiny", "none": "cosyvoice3-tiny-fp32"}
STAMP = "stamp.json"
BUILD_COMMAND = ".venv-ref/bin/python -m tests.helpers.cosyvoice3_fixture --out test-artifacts/tiny-models-v3"


def info() -> dict:
    return json.loads((DATA / "fixture.json").read_text(encoding="utf-8"))


def load_reference() -> dict[str, np.ndarray]:
    with np.load(DATA / "reference.npz") as npz:
        return {k: npz[k] for k in npz.files}


def hift_noise(n_samples: int) -> np.ndarray:
    """The sine noise the fixture injected into upstream (same seed and draw as make_fixture)."""
    from tests.cosyvoice3.make_fixture import hift_noise as draw

    return draw(n_samples)


def write_official_dir(directory: Path) -> Path:
    """Write the tiny official-layout Fun-CosyVoice3 directory; returns it."""
    import torch

    from tests.helpers.cosyvoice_tiny import campplus_standin, speech_tokenizer_standin
    from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

    directory = Path(directory)
    qwen = directory / "CosyVoice-BlankEN"
    write_tiny_tokenizer(qwen)
    recorded = info()["tokenizer"]["files_sha256"]
    for name, digest in recorded.items():
        if hashlib.sha256((qwen / name).read_bytes()).hexdigest() != digest:
            raise RuntimeError(f"the tiny tokenizer's {name} differs from the one the fixture was made with")
    with np.load(DATA / "weights.npz") as npz:
        (qwen / "config.json").write_text(str(npz["__qwen_config__"]), encoding="utf-8")
        (directory / "cosyvoice3.yaml").write_text(str(npz["__yaml__"]), encoding="utf-8")
        parts: dict[str, dict] = {"llm": {}, "flow": {}, "hift": {}}
        for key in npz.files:
            if key.startswith("__"):
                continue
            part, name = key.split(".", 1)
            parts[part][name] = torch.from_numpy(npz[key].astype(np.float32))
    for part, state in parts.items():
        torch.save(state, directory / f"{part}.pt")
    campplus_standin(directory / "campplus.onnx")
    speech_tokenizer_standin(directory / "speech_tokenizer_v3.onnx")
    return directory


# --- the converted cache for .venv tests ------------------------------------------------------

def _sources() -> list[Path]:
    return sorted([*DATA.glob("*"), *(REPO / "cosyedge" / "export").glob("*.py"), Path(__file__),
                   REPO / "tests" / "helpers" / "cosyvoice_tiny.py", REPO / "tests" / "helpers" / "cosyvoice_tokenizer.py"])


def _stamp() -> dict:
    return {p.relative_to(REPO).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in _sources()}


def stale_reason(out: Path = DEFAULT_OUT) -> str | None:
    """Why the converted cache cannot be used (None when it can)."""
    try:
        recorded = json.loads((Path(out) / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"no converted tiny CosyVoice3 model in {out}"
    if recorded != _stamp():
        return "built from other fixture or converter sources"
    missing = [m for m in MODEL_IDS.values() if not (Path(out) / "models" / m / "manifest.json").is_file()]
    return f"{missing} missing" if missing else None


def models_dir(out: Path = DEFAULT_OUT) -> Path:
    """``out/models`` once it is usable; RuntimeError with the build command otherwise."""
    reason = stale_reason(out)
    if reason is not None:
        raise RuntimeError(f"the tiny CosyVoice3 model is not usable ({reason}); build it with: {BUILD_COMMAND}")
    return Path(out) / "models"


def build(out: Path = DEFAULT_OUT) -> Path:
    from cosyedge.export.cosyvoice.v3.convert import convert

    def fill(work: Path) -> dict:
        source = write_official_dir(work / "src" / "Fun-CosyVoice3-0.5B")
        for quantize, model_id in MODEL_IDS.items():
            convert(source, work / "models" / model_id, quantize=quantize)
        return _stamp()

    return tiny_models.build_in_place(out, fill)


def main(argv: list[str] | None = None) -> int:
    return tiny_models.cache_command(argv, "tests.helpers.cosyvoice3_fixture", "the tiny CosyVoice3 models",
                                     DEFAULT_OUT, stale_reason, build)


if __name__ == "__main__":
    sys.exit(main())
