"""The tiny converted CosyVoice2 model that `.venv` tests use, built once in `.venv-ref` and cached.

Building it needs the PyTorch reference (`.venv-ref`); using it needs only our runtime (`.venv`).
So ``scripts/test.sh`` runs the builder (:data:`BUILD_COMMAND`) before the `.venv` pass, and the
`.venv` fixture ``tiny_cosyvoice_models`` (tests/conftest.py) only finds the result here.

Layout under ``test-artifacts/tiny-models/``: ``models/<MODEL_ID>/`` (a converted model, as under
``models/``) and ``stamp.json``: the sha256 of every repository source file the build imported (the
builder, the converter and whatever they import) and the versions of the reference packages. The
build is reused while the stamp matches. `.venv` can check the sources but not the versions (the
reference is not installed there); the builder checks both. Standard library only: both
environments import this module.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable

from tests.helpers import REPO

DEFAULT_OUT = REPO / "test-artifacts" / "tiny-models"
MODEL_ID = "cosyvoice2-tiny"
#: The same model with the streamed estimator graph of the first streaming converter (one packed
#: key/value input, tests/helpers/legacy_flow_stream.py), under ``legacy-models/`` so that nothing
#: listing ``models/`` sees it.
PACKED_STREAM_MODEL_ID = "cosyvoice2-tiny-packed-stream"
#: The tiny checkpoint's two SFT speakers (spk2info.pt), as the presets of the converted model.
PRESET_NAMES = ("中文女", "英文男")
STAMP_NAME = "stamp.json"
STAMP_FORMAT = 1
#: What decides the converted weights besides our sources: the reference and the export tools.
REFERENCE_PACKAGES = ("cosyvoice-minicpmo", "torch", "transformers", "onnx", "onnxruntime", "numpy")
BUILD_COMMAND = ".venv-ref/bin/python -m tests.helpers.cosyvoice_tiny --out test-artifacts/tiny-models"


class TinyModelsMissing(RuntimeError):
    """The cached tiny model is absent or older than its sources; the message says how to build it."""


def models_dir(out: Path = DEFAULT_OUT) -> Path:
    """The ``models/`` directory of a cache (the model is ``models/<MODEL_ID>``)."""
    return Path(out) / "models"


def legacy_models_dir(out: Path = DEFAULT_OUT) -> Path:
    """The cache's ``legacy-models/`` directory (``legacy-models/<PACKED_STREAM_MODEL_ID>``)."""
    return Path(out) / "legacy-models"


def repo_sources(modules: Iterable[object]) -> list[str]:
    """Repository-relative paths of the loaded modules' files under ``cosyedge/`` and ``tests/``."""
    found = set()
    for module in modules:
        file = getattr(module, "__file__", None)
        if not file:
            continue
        try:
            relative = Path(file).resolve().relative_to(REPO)
        except ValueError:
            continue
        if relative.parts[0] in ("cosyedge", "tests") and relative.suffix == ".py":
            found.add(relative.as_posix())
    return sorted(found)


def digests(sources: Iterable[str]) -> dict[str, str]:
    """sha256 of each repository-relative file; ``"missing"`` for one that is gone."""
    result = {}
    for name in sources:
        path = REPO / name
        result[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return result


def reference_versions() -> dict[str, str | None]:
    """The installed versions of :data:`REFERENCE_PACKAGES` (None where one is not installed)."""
    versions: dict[str, str | None] = {}
    for name in REFERENCE_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def stamp(sources: Iterable[str]) -> dict:
    """The stamp of a build that imported ``sources``, in this environment."""
    return {"format": STAMP_FORMAT, "model_id": MODEL_ID, "python": sys.version.split()[0],
            "sources": digests(sources), "reference": reference_versions()}


def read_stamp(out: Path = DEFAULT_OUT) -> dict | None:
    """The cache's stamp, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((Path(out) / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stale_reason(out: Path = DEFAULT_OUT, check_versions: bool = False) -> str | None:
    """Why the cache cannot be used as it is, or None when it can.

    ``check_versions``: also compare the reference packages' versions (only where they are installed).
    """
    found = read_stamp(out)
    if found is None or found.get("format") != STAMP_FORMAT or found.get("model_id") != MODEL_ID:
        return f"no tiny CosyVoice model built in {out}"
    if not (models_dir(out) / MODEL_ID / "manifest.json").is_file():
        return f"{models_dir(out) / MODEL_ID} has no manifest.json"
    recorded = found.get("sources") or {}
    changed = [name for name, digest in digests(recorded).items() if digest != recorded[name]]
    if changed:
        return f"built before {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''} changed"
    if check_versions and found.get("reference") != reference_versions():
        return f"built with other reference packages ({found.get('reference')})"
    return None


def require(out: Path = DEFAULT_OUT) -> Path:
    """The cache's ``models/`` directory; :class:`TinyModelsMissing` with the build command when stale."""
    reason = stale_reason(out)
    if reason is not None:
        command = BUILD_COMMAND if Path(out) == DEFAULT_OUT else \
            f".venv-ref/bin/python -m tests.helpers.cosyvoice_tiny --out {out}"
        raise TinyModelsMissing(f"the tiny CosyVoice model is not usable ({reason}); build it with: {command}"
                                " (scripts/test.sh does this before the .venv run)")
    return models_dir(out)


def build_in_place(out: Path, fill: Callable[[Path], dict]) -> Path:
    """Build a cache anew beside ``out`` and put it in ``out``'s place once it is complete.

    ``fill(work)`` writes ``work/models/`` (and what it converts from, under ``work/src/``, which is
    removed after) and returns the stamp, written as ``work/stamp.json``. Returns ``out/models``.
    """
    import os
    import shutil
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        found = fill(work)
        shutil.rmtree(work / "src", ignore_errors=True)  # .venv tests need the converted models only
        (work / STAMP_NAME).write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return models_dir(out)


def cache_command(argv: list[str] | None, prog: str, what: str, default_out: Path,
                  stale: Callable[[Path], str | None], build: Callable[[Path], Path]) -> int:
    """``python -m <prog> [--out DIR] [--force]``: build ``what`` into DIR unless its stamp still matches."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=f"Build {what} the .venv tests use.")
    parser.add_argument("--out", type=Path, default=default_out,
                        help=f"cache directory (default: {default_out.relative_to(REPO)})")
    parser.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    reason = "--force" if args.force else stale(out)
    if reason is None:
        print(f"{what} up to date: {models_dir(out)}")
        return 0
    print(f"building {what} ({reason}) ...", flush=True)
    print(f"{what} built: {build(out)}")
    return 0


def open_tiny_engine(models: Path, model_id: str = MODEL_ID, **settings: object):  # noqa: ANN201
    """The engine of a tiny converted model at one thread (the tests' setting), ``settings`` added."""
    from cosyedge.config import Settings
    from cosyedge.engines.loader import load_engine

    return load_engine(Settings(models_dir=models, model=model_id, onnx_threads=1, **settings))


def sine_prompt(engine, seconds: float = 3.0, text: str = "Hello world, this is a tiny test."):  # noqa: ANN001, ANN201
    """A voice prompt the tiny engines encode: a 150 Hz tone of ``seconds`` at 16 kHz with ``text``."""
    import numpy as np

    t = np.arange(int(seconds * 16000)) / 16000
    return engine.encode_prompt((0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), 16000, text)
