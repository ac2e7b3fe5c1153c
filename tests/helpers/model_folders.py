"""Small model folders for catalog, import and switching tests: a few bytes per file and a manifest
written by the project's own writer (cosyedge.catalog.manifest.write_manifest), like setup-model's and
convert's. They hold no runnable model; tests that switch use the fake engine."""

from __future__ import annotations

from pathlib import Path

from cosyedge.catalog.manifest import write_manifest

KOKORO_LICENCE = {"weights": "Apache-2.0 (hexgrad/Kokoro-82M)", "packages": "Apache-2.0"}
COSYVOICE_LICENCE = {"weights": "Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B)", "code": "Apache-2.0"}


def make_model(models_dir: Path, name: str, engine: str = "kokoro", licence: object = KOKORO_LICENCE,
               files: dict[str, bytes] | None = None) -> Path:
    """``models_dir/name`` with ``files`` (default: two small ones) and their manifest."""
    folder = Path(models_dir) / name
    files = files if files is not None else {"model.onnx": b"\x08\x01" * 600, "vocab.json": b"{}"}
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    facts = {"licence": licence} if licence is not None else {}
    write_manifest(folder, engine, list(files), **facts)
    return folder
