"""Model directory manifests: ``models/<id>/manifest.json`` says which model a directory holds and
lists every file with its sha256.

Writing and verifying manifests is shared by every engine and converter, so a model directory is
checked the same way everywhere (load, self-test, OTA verification). This module is also the one
reader of a model's identity (:class:`ModelIdentity`: family, version, model id, engine name) and
the one place that fixes the model-family schema (docs/models.md):

* ``family`` names the model family (``kokoro``, ``cosyvoice``); ``version`` the family's version
  where versions are different engines (CosyVoice 1, 2, 3: a voice encoded by one does not fit
  another). Kokoro has one engine; its manifest's ``version`` is the release of its weights.
* The engine name follows from the two (:func:`engine_name`: ``kokoro``, ``cosyvoice2``); it is what
  ``VoicePrompt.engine``, saved voices' meta, prompt-cache keys and ``NATIVE_ABILITIES`` carry.
  Manifests also keep writing it as ``engine``, for the cosyedge releases that read only that.
* A manifest from before the schema names only its ``engine``; :data:`FAMILY_VERSIONS` read
  backwards gives its family and version (``cosyvoice2`` -> cosyvoice 2), so its name, and with it
  every cached prompt and saved voice, stays the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosyedge.errors import ModelMissingError
from cosyedge.files import write_atomic

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_CHUNK = 1 << 20

#: The model families this cosyedge knows and, for each, the versions that are engines of their own
#: (None: the whole family is one engine).
FAMILY_VERSIONS: dict[str, tuple[int, ...] | None] = {"kokoro": None, "cosyvoice": (1, 2, 3)}


def engine_name(family: str, version: int | None = None) -> str:
    """The engine name of a family's version: ``kokoro``; ``cosyvoice1``/``2``/``3``."""
    return family if FAMILY_VERSIONS.get(family) is None else f"{family}{version}"


#: Engine name -> (family, version) for every known engine: how a manifest that names only its
#: engine (all of them before the family schema) is read.
_BY_ENGINE = {engine_name(family, version): (family, version)
              for family, versions in FAMILY_VERSIONS.items() for version in (versions or (None,))}


@dataclass(frozen=True)
class ModelIdentity:
    """Which model a directory holds. ``model_id``: the manifest's ``model_id`` when it names one
    (Kokoro's does), else the directory's name (a converted CosyVoice model is known by its folder)."""

    family: str
    version: int | None
    model_id: str
    engine: str

    @property
    def known(self) -> bool:
        """True when this cosyedge knows the family and version (not that it can run them)."""
        return _BY_ENGINE.get(self.engine) == (self.family, self.version)


def identity_fields(family: str, version: int | None = None) -> dict[str, Any]:
    """What a manifest writes about its identity: ``engine``, ``family`` and (when the family has
    versions) ``version``."""
    fields: dict[str, Any] = {"engine": engine_name(family, version), "family": family}
    if FAMILY_VERSIONS.get(family) is not None:
        fields["version"] = version
    return fields


def manifest_identity(manifest: dict, model_dir: Path) -> ModelIdentity:
    """The identity of a parsed manifest; an unknown family or engine comes back as named
    (``known`` False). Raises ModelMissingError when ``engine`` contradicts ``family``/``version``."""
    model_id = str(manifest.get("model_id") or Path(model_dir).name)
    named = manifest.get("engine")
    family = manifest.get("family")
    if family is None:  # written before the family schema: the engine name alone
        family, version = _BY_ENGINE.get(named, (named, None))
        return ModelIdentity(str(family), version, model_id, str(named))
    family = str(family)
    if family in FAMILY_VERSIONS:
        version = manifest.get("version") if FAMILY_VERSIONS[family] is not None else None
        engine = engine_name(family, version)
    else:
        version, engine = manifest.get("version"), str(named or family)
    if named is not None and named != engine:
        raise ModelMissingError(f"{Path(model_dir) / MANIFEST_NAME} names engine {named!r} but family "
                                f"{family!r} version {version!r} (that is {engine!r}); convert the model again")
    return ModelIdentity(family, version, model_id, engine)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(model_dir: Path, engine: str, files: list[str], **facts: Any) -> dict:
    """Hash ``files`` (relative to model_dir) and write manifest.json atomically; return it.

    ``engine`` names a known engine (its family and version are written with it) or any other name
    (written as it is)."""
    model_dir = Path(model_dir)
    identity = identity_fields(*_BY_ENGINE[engine]) if engine in _BY_ENGINE else {"engine": engine}
    manifest = {
        **identity,
        **facts,
        "files": {name: {"sha256": sha256_file(model_dir / name),
                         "bytes": (model_dir / name).stat().st_size} for name in sorted(files)},
    }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    write_atomic(model_dir / MANIFEST_NAME, text.encode("utf-8"), mode=0o644)
    return manifest


_MISSING_FIELDS = "missing 'engine' or 'files'"


def _load(model_dir: Path, fix_hint: str) -> dict:
    """manifest.json as a dict naming an engine or a family, or ModelMissingError ending with ``fix_hint``."""
    path = Path(model_dir) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or ("engine" not in manifest and "family" not in manifest):
            raise ValueError(_MISSING_FIELDS)
        return manifest
    except FileNotFoundError:
        raise ModelMissingError(f"no model at {model_dir} ({MANIFEST_NAME} missing); {fix_hint}") from None
    except ValueError as exc:
        raise ModelMissingError(f"{path} is unreadable ({exc}); {fix_hint}") from None


def read_manifest(model_dir: Path, fix_hint: str) -> dict:
    """Load manifest.json (identity and file list) or raise ModelMissingError that ends with ``fix_hint``."""
    manifest = _load(model_dir, fix_hint)
    if not isinstance(manifest.get("files"), dict):
        raise ModelMissingError(f"{Path(model_dir) / MANIFEST_NAME} is unreadable ({_MISSING_FIELDS}); {fix_hint}")
    return manifest


def read_identity(model_dir: Path, fix_hint: str = "") -> ModelIdentity:
    """The identity of the model in ``model_dir`` (cheap: one JSON read, no file checks)."""
    return manifest_identity(_load(model_dir, fix_hint), model_dir)


def weights_digest(manifest: dict) -> str:
    """What a model is, beyond its folder's name: sha256 over the names and sha256s of the files its
    manifest lists. Two boxes holding the same conversion agree on it; a reconversion, another
    quantization or another model under the same id does not (a voice file's encodings are reused
    only on a model with their digest, cosyedge/voices/exchange.py)."""
    digest = hashlib.sha256(b"cosyedge-weights-v1")
    for name, info in sorted((manifest.get("files") or {}).items()):
        digest.update(f"{name}\0{info.get('sha256') if isinstance(info, dict) else ''}\n".encode())
    return digest.hexdigest()


def model_digest(model_dir: Path) -> str | None:
    """:func:`weights_digest` of the model in ``model_dir``; None when it has no readable manifest."""
    try:
        return weights_digest(read_manifest(model_dir, ""))
    except ModelMissingError:
        return None


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
