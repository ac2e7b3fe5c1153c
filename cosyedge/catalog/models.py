"""The models on this box: every directory under ``models/`` that holds a usable model, and the
checked import of a copied one.

:class:`ModelCatalog` reads each ``models/<id>/manifest.json`` (the one identity reader,
:mod:`cosyedge.catalog.manifest`) into a :class:`ModelInfo`: its engine, what the engine does natively
(``NATIVE_ABILITIES``), its size and its licence (the manifest's ``licence`` field, docs/models.md).
A directory is *usable* when its manifest reads, its engine is one this cosyedge runs and every file
it lists is there with its size; listing stats files but never hashes them (a CosyVoice model is
gigabytes). :meth:`ModelCatalog.import_folder` is where hashes are checked: the folder is copied
into a hidden staging folder under ``models/``, every sha256 of the copy is compared with the
manifest, and only then is it renamed into place, so a folder that does not match never appears.

Switching the served model is the service's (it owns the queue and the engine); this module only
says which models there are and whether one may be served.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cosyedge.catalog.abilities import NATIVE_ABILITIES
from cosyedge.errors import ConflictError, CosyedgeError, InputError, NotFoundError
from cosyedge.catalog.manifest import MANIFEST_NAME, ModelIdentity, manifest_identity, read_manifest, sha256_file

logger = logging.getLogger(__name__)

#: A model id: the name of its directory under models/ (what ``--model`` takes).
MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: What the catalog says of a manifest without a ``licence`` field (converted before it was written).
LICENCE_UNKNOWN = "not recorded in the manifest"
#: The streamed flow's cache layout today's converter writes, by engine (the manifest's
#: ``config.flow.stream.kv_layout``, ``export/cosyvoice/common/flow.py`` ``KV_LAYOUT``): a model that
#: records another, or has no streaming graphs, still loads and speaks; converting it again brings this.
#: (CosyVoice3's: ``export/cosyvoice/v3/convert.py`` ``STREAM_LAYOUT``.)
CURRENT_STREAM_LAYOUT = {"cosyvoice2": "chunk_blocked", "cosyvoice3": "chunk_blocked"}
_STAGING_PREFIX = ".import-"


@dataclass(frozen=True)
class ModelInfo:
    """One usable model directory, as the picker, ``GET /models`` and ``models list`` show it."""

    id: str
    engine: str
    family: str
    version: int | None
    native_clone: bool
    native_instruct: bool
    size_bytes: int
    licence: str
    quantization: str | None = None
    #: What converting the model again would bring, and why (:func:`reconversion_note`); "" when nothing.
    reconvert: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "engine": self.engine, "family": self.family, "version": self.version,
                "capabilities": {"native_clone": self.native_clone,
                                 "native_instruct": self.native_instruct},
                "size_bytes": self.size_bytes, "size": human_size(self.size_bytes),
                "licence": self.licence, "quantization": self.quantization,
                "reconvert": self.reconvert or None}

    def capabilities_line(self) -> str:
        """What the engine does with a prompt and an instruction, in words."""
        clone = "clones a voice" if self.native_clone else "closest built-in voice only (no cloning)"
        instruct = ("follows instructions" if self.native_instruct
                    else "instructions as speed/pitch/volume controls")
        return f"{clone}; {instruct}"


@dataclass(frozen=True)
class UnusableModel:
    """A directory under models/ that holds no usable model, and why (shown to the operator)."""

    id: str
    problem: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "problem": self.problem}


def human_size(size: int) -> str:
    """``328 MB``, ``1.2 GB``: decimal units, as disk tools show them."""
    if size >= 1e9:
        return f"{size / 1e9:.1f} GB"
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


def licence_line(manifest: dict) -> str:
    """The manifest's ``licence`` in one line: a string as it is; an object as ``key: value`` parts,
    ``weights`` first (the licence that binds the user of the model)."""
    licence = manifest.get("licence")
    if isinstance(licence, str) and licence.strip():
        return licence.strip()
    if isinstance(licence, dict) and licence:
        keys = sorted(licence, key=lambda key: (key != "weights", key))
        return "; ".join(f"{key}: {licence[key]}" for key in keys)
    return LICENCE_UNKNOWN


def reconversion_note(engine: str, manifest: dict) -> str:
    """What converting this model again brings, read from what its manifest records ("" when it is
    as today's converter writes it): streaming, or the streaming cache of :data:`CURRENT_STREAM_LAYOUT`;
    for CosyVoice-300M, the LLM step graph written in place."""
    if engine == "cosyvoice1":
        return _v1_reconversion_note(manifest)
    layout = CURRENT_STREAM_LAYOUT.get(engine)
    if layout is None:
        return ""
    flow = (manifest.get("config") or {}).get("flow") or {}
    stream = flow.get("stream")
    if not isinstance(stream, dict):
        brings = " and the quality modes' bounded memory" if engine == "cosyvoice2" else ""
        return ("converted before streaming: it answers each sentence whole. Converting it again brings "
                f"hop-by-hop streaming{brings}")
    if stream.get("kv_layout") != layout:
        return ("converted with the first streaming graphs: it streams, but each streamed step unpacks its "
                "whole cache (about 2.5x the CPU of a whole-sentence render) and keeps every frame (the quality "
                "modes' bounded left context does not apply). Converting it again brings the chunk-blocked "
                "cache: streaming at its true cost and bounded memory")
    return ""


def _v1_reconversion_note(manifest: dict) -> str:
    """CosyVoice-300M: every conversion streams; one whose LLM step graph is format 1 (the manifest's
    ``config.llm.step_format`` absent: converted before format 2, ``export/cosyvoice/v1/step_graph.py``)
    still loads and speaks the same tokens, and gains the cache written in place."""
    llm = (manifest.get("config") or {}).get("llm")
    if not isinstance(llm, dict) or llm.get("step_format", 1) != 1:
        return ""
    return ("converted with the first LLM step graph: each decoded token copies the whole KV cache and "
            "reorders the positional rows (about a third of a decode step at 1 thread, measured at full size). "
            "Converting it again brings the in-place LLM cache: faster decoding, the same speech tokens")


def _listed_files(manifest: dict, model_dir: Path) -> list[tuple[str, dict]]:
    """The manifest's files, each a relative path that stays inside the model directory; an
    InputError for one that would leave it (``../``, an absolute path)."""
    files = []
    for name, info in manifest["files"].items():
        parts = PurePosixPath(str(name)).parts
        if not parts or PurePosixPath(str(name)).is_absolute() or ".." in parts or "\\" in str(name):
            raise InputError(f"{model_dir / MANIFEST_NAME} lists {name!r}, a path outside the model "
                             "folder: this is not a model folder cosyedge wrote", code="model_folder_invalid",
                             folder=str(model_dir), problem="path outside the folder")
        if not isinstance(info, dict) or not isinstance(info.get("sha256"), str):
            raise InputError(f"{model_dir / MANIFEST_NAME} has no sha256 for {name!r}",
                             code="model_folder_invalid", folder=str(model_dir), problem="no sha256")
        files.append((str(name), info))
    return files


class ModelCatalog:
    """The model directories under one ``models/`` folder (see the module doc)."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = Path(models_dir)

    def scan(self) -> tuple[list[ModelInfo], list[UnusableModel]]:
        """(usable models sorted by id, directories that hold none and why). Cheap: one JSON read
        and a stat per file."""
        usable: list[ModelInfo] = []
        unusable: list[UnusableModel] = []
        try:
            folders = sorted(path for path in self.models_dir.iterdir()
                             if path.is_dir() and not path.name.startswith("."))
        except OSError:
            return [], []
        for folder in folders:
            try:
                usable.append(self._read(folder, folder.name))
            except CosyedgeError as exc:
                unusable.append(UnusableModel(folder.name, exc.message))
        return usable, unusable

    def models(self) -> list[ModelInfo]:
        """The usable models."""
        return self.scan()[0]

    def get(self, model_id: str) -> ModelInfo:
        """The usable model ``model_id``; NotFoundError when there is no such directory, InputError
        (``model_not_usable``) naming the problem when it holds no usable model."""
        if not isinstance(model_id, str) or not MODEL_ID_RE.match(model_id):
            raise NotFoundError(f"{model_id!r} is not a model id (a folder name under models/)",
                                code="model_unknown", model=str(model_id))
        folder = self.models_dir / model_id
        if not folder.is_dir():
            names = ", ".join(info.id for info in self.models()) or "none"
            raise NotFoundError(f"no model {model_id!r} under {self.models_dir}; models here: {names}",
                                code="model_unknown", model=model_id)
        try:
            return self._read(folder, model_id)
        except CosyedgeError as exc:
            raise InputError(f"model {model_id!r} cannot be used: {exc.message}", code="model_not_usable",
                             model=model_id, problem=exc.message) from None

    def _read(self, folder: Path, model_id: str, *, hashes: bool = False) -> ModelInfo:
        """The ModelInfo of ``folder``, or a CosyedgeError naming why it is not usable."""
        return self._check(folder, read_manifest(folder, "copy the whole model folder again"), model_id,
                           hashes=hashes)

    def _check(self, folder: Path, manifest: dict, model_id: str, *, hashes: bool,
               shown: Path | None = None) -> ModelInfo:
        """The ModelInfo of ``folder`` read with ``manifest``; messages name ``shown`` (the folder
        the user passed, when ``folder`` is its staging copy)."""
        shown = shown or folder
        identity = manifest_identity(manifest, shown)
        self._check_runnable(identity, shown)
        problems = []
        size = 0
        for name, info in _listed_files(manifest, shown):
            path = folder / name
            if not path.is_file():
                problems.append(f"{name} is missing")
                continue
            actual = path.stat().st_size
            size += actual
            if "bytes" in info and actual != info["bytes"]:
                problems.append(f"{name} has the wrong size ({actual} bytes, the manifest says {info['bytes']})")
            elif hashes and sha256_file(path) != info["sha256"]:
                problems.append(f"{name} does not match its sha256 in the manifest (damaged or changed)")
        if problems:
            raise InputError(f"model folder {shown}: {'; '.join(problems)}", code="model_file_corrupt",
                             folder=str(shown), problems=tuple(problems))
        clone, instruct = NATIVE_ABILITIES[identity.engine]
        return ModelInfo(id=model_id, engine=identity.engine, family=identity.family,
                         version=identity.version, native_clone=clone, native_instruct=instruct,
                         size_bytes=size, licence=licence_line(manifest),
                         quantization=manifest.get("quantization"),
                         reconvert=reconversion_note(identity.engine, manifest))

    @staticmethod
    def _check_runnable(identity: ModelIdentity, folder: Path) -> None:
        if not identity.known or identity.engine not in NATIVE_ABILITIES:
            runs = ", ".join(sorted(NATIVE_ABILITIES))
            raise InputError(f"{folder / MANIFEST_NAME} names engine {identity.engine!r}; this cosyedge "
                             f"runs {runs}", code="model_not_usable", model=folder.name,
                             problem=f"engine {identity.engine!r}")

    def import_folder(self, source: Path, name: str | None = None) -> ModelInfo:
        """Copy a model folder (from a USB stick, another box) into ``models/<name>`` after checking
        every file's sha256 on the copy; nothing appears under models/ unless all match.

        ``name`` defaults to the folder's name. A folder that already is ``models/<name>`` is checked
        in place. Refusals: InputError (not a model folder, a file that does not match), ConflictError
        (``model_exists``: a model of that name is there already)."""
        source = Path(source)
        model_id = name or source.name
        if not MODEL_ID_RE.match(model_id):
            raise InputError(f"{model_id!r} cannot name a model: use letters, digits, '.', '_' or '-' "
                             "(pass --name)", code="model_folder_invalid", folder=str(source),
                             problem="name")
        if not source.is_dir():
            raise InputError(f"{source} is not a folder: pass the copied model folder (it holds "
                             f"{MANIFEST_NAME})", code="model_folder_invalid", folder=str(source),
                             problem="not a folder")
        try:
            manifest = read_manifest(source, "pass a model folder written by setup-model or convert")
        except CosyedgeError as exc:
            raise InputError(exc.message, code="model_folder_invalid", folder=str(source),
                             problem="manifest") from None
        self._check_runnable(manifest_identity(manifest, source), source)
        files = _listed_files(manifest, source)
        target = self.models_dir / model_id
        if target.exists() and target.resolve() == source.resolve():
            info = self._read(target, model_id, hashes=True)
            logger.info("model %s checked in place (%d files)", model_id, len(files))
            return info
        if target.exists():
            raise ConflictError(f"a model named {model_id!r} is already in {self.models_dir}; pass "
                                "--name to import this one under another name", code="model_exists",
                                model=model_id)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        staging = self.models_dir / f"{_STAGING_PREFIX}{model_id}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for relative, _ in files:
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(source / relative, staging / relative)
                except FileNotFoundError:
                    raise InputError(f"{source} lacks {relative}, which its manifest lists: copy the "
                                     "whole folder again", code="model_file_corrupt", folder=str(source),
                                     problems=(f"{relative} is missing",)) from None
            shutil.copyfile(source / MANIFEST_NAME, staging / MANIFEST_NAME)
            info = self._check(staging, manifest, model_id, hashes=True, shown=source)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("imported model %s from %s (%d files, sha256 checked)", model_id, source, len(files))
        return info
