"""Model directory manifests: ``models/<id>/manifest.json`` names the engine and every file with sha256.

Writing and verifying manifests is shared by every engine and converter, so a model directory is
checked the same way everywhere (load, self-test, OTA verification).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from cosyedge.errors import ModelMissingError
from cosyedge.files import write_atomic

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(model_dir: Path, engine: str, files: list[str], **facts: Any) -> dict:
    """Hash ``files`` (relative to model_dir) and write manifest.json atomically; return it."""
    model_dir = Path(model_dir)
    manifest = {
        "engine": engine,
        **facts,
        "files": {name: {"sha256": sha256_file(model_dir / name),
                         "bytes": (model_dir / name).stat().st_size} for name in sorted(files)},
    }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    write_atomic(model_dir / MANIFEST_NAME, text.encode("utf-8"), mode=0o644)
    return manifest


def read_manifest(model_dir: Path, fix_hint: str) -> dict:
    """Load manifest.json or raise ModelMissingError that ends with ``fix_hint``."""
    path = Path(model_dir) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest.get("files"), dict) or "engine" not in manifest:
            raise ValueError("missing 'engine' or 'files'")
        return manifest
    except FileNotFoundError:
        raise ModelMissingError(f"no model at {model_dir} ({MANIFEST_NAME} missing); {fix_hint}") from None
    except ValueError as exc:
        raise ModelMissingError(f"{path} is unreadable ({exc}); {fix_hint}") from None


def verify_files(model_dir: Path, manifest: dict, fix_hint: str, *, hashes: bool = True) -> None:
    """Check that every listed file exists with its size (and sha256 when ``hashes``)."""
    problems = []
    for name, info in manifest["files"].items():
        path = Path(model_dir) / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != info.get("bytes", path.stat().st_size):
            problems.append(f"{name} has the wrong size")
        elif hashes and sha256_file(path) != info["sha256"]:
            problems.append(f"{name} is corrupt (sha256 mismatch)")
    if problems:
        raise ModelMissingError(f"model at {model_dir}: {'; '.join(problems)}; {fix_hint}")
