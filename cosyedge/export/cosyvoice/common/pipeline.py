"""The conversion frame every CosyVoice version's converter runs in, and the steps of the CosyVoice2
form that other versions reuse.

The work is a list of export steps (a :class:`ModelSpec`'s ``steps``), each a function of one
:class:`ExportContext`: it reads what it needs from the source directory and the parsed yaml, writes
files through :meth:`ExportContext.add_file`, and puts the constants the runtime needs under its own key
of :attr:`ExportContext.runtime`. Steps run in order into a temporary directory that replaces the
output directory only when every step has succeeded (:func:`export_into`); the manifest lists every
file with its sha256 (:func:`build_manifest`).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cosyedge.errors import InputError, ModelMissingError
from cosyedge.export.cosyvoice.common.upstream_config import read_config
from cosyedge.catalog.manifest import identity_fields, sha256_file

logger = logging.getLogger(__name__)

#: The model family a conversion writes into its manifest (schema: cosyedge.catalog.manifest).
FAMILY = "cosyvoice"
FORMAT_VERSION = 1
QUANTIZE_CHOICES = ("none", "int8")


# ----------------------------------------------------------------------------------------------
# Context, steps, spec
# ----------------------------------------------------------------------------------------------

@dataclass
class ExportContext:
    """What one conversion shares between its steps."""

    src: Path
    out: Path                      # the temporary directory the steps write into
    config: dict[str, Any]
    spec: "ModelSpec"              # which model version is converted
    quantize: str = "none"
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    quantization: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # per-step choices, e.g. llm_bits

    @property
    def model(self) -> "ModelSpec":
        """The converted version's spec (the steps read its version and label)."""
        return self.spec

    def source_file(self, name: str) -> Path:
        path = self.src / name
        if not path.is_file():
            raise ModelMissingError(f"{path} is missing: point --src at the official {self.model.label} directory")
        return path

    def add_file(self, name: str, role: str) -> Path:
        """Register an output file (written by the caller at the returned path)."""
        self.files[name] = {"role": role}
        return self.out / name


ExportStep = Callable[[ExportContext], None]


def flow_step(ctx: ExportContext) -> None:
    """The CosyVoice2 flow (encoder, estimator, streaming graphs): :func:`~.flow.export_flow`."""
    from cosyedge.export.cosyvoice.common.flow import export_flow
    export_flow(ctx)


def hift_step(ctx: ExportContext) -> None:
    """The HiFT vocoder: :func:`~.hift.export_hift`."""
    from cosyedge.export.cosyvoice.common.hift import export_hift
    export_hift(ctx)


def llm_step(ctx: ExportContext) -> None:
    """The Qwen2 speech LLM (reads the version from the context): :func:`~.llm.export_llm_step`."""
    from cosyedge.export.cosyvoice.common.llm import export_llm_step
    export_llm_step(ctx)


def frontend_step(ctx: ExportContext) -> None:
    """Tokenizer, campplus, speech tokenizer, presets: :func:`~.llm.export_frontend_step`."""
    from cosyedge.export.cosyvoice.common.llm import export_frontend_step
    export_frontend_step(ctx)


def compact_step(ctx: ExportContext) -> None:
    """Float weights stored compactly: :func:`~.quantize.compact_float_weights`."""
    from cosyedge.export.cosyvoice.common.quantize import compact_float_weights
    compact_float_weights(ctx)


@dataclass(frozen=True)
class ModelSpec:
    """What differs between the CosyVoice versions the converter writes (each version folder's
    ``convert`` module has one): the yaml name, the steps and the files they read, the licence."""

    version: int
    label: str                                   # the official directory's name, for messages
    config_name: str
    steps: tuple[tuple[str, ExportStep], ...]
    sources: dict[str, tuple[str, ...]]
    #: The manifest's ``licence`` (docs/models.md).
    licence: dict[str, str]
    #: The yaml names of the other versions, so that a directory given as the wrong one is named.
    other_configs: dict[str, str] = field(default_factory=dict)



# ----------------------------------------------------------------------------------------------
# Orchestration
# ----------------------------------------------------------------------------------------------

def check_source(src: Path, steps: list[str], spec: ModelSpec) -> None:
    """The official files are all in ``src``, or a ModelMissingError naming what is not (and where
    the checkpoint is, when ``src`` is a folder above it, such as a Hugging Face cache)."""
    name = spec.config_name
    if not (src / name).is_file():
        for other, family in spec.other_configs.items():
            if (src / other).is_file():
                raise InputError(f"{src} holds {other}, not {name}: it is a {family} checkpoint, not "
                                 f"{spec.label}; convert it with `python -m cosyedge convert {family}`",
                                 code="convert_wrong_family", found=family)
        found = sorted({p.parent for depth in (1, 2, 3) for p in src.glob("*/" * depth + name)})
        where = (f"; it is in {found[0]}: pass --src {found[0]}" if len(found) == 1
                 else f"; found in {', '.join(map(str, found))}: pass one as --src" if found else "")
        raise ModelMissingError(f"{src / name} is missing: point --src at the official "
                                f"{spec.label} directory{where}")
    missing = [name for step in steps for name in spec.sources.get(step, ())
               if not any((src / alt).is_file() and (src / alt).stat().st_size for alt in name.split("|"))]
    if missing:
        raise ModelMissingError(f"{src} lacks {', '.join(m.replace('|', ' or ') for m in missing)} (missing "
                                f"or empty): copy or download the complete {spec.label} directory")


def check_out(src: Path, out: Path, force: bool) -> None:
    """``out`` can be written (replaced with ``force``) without deleting the source or other models."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; pass a folder such as models/cosyvoice2-int8")
    if out.resolve() == src.resolve() or out.resolve() in src.resolve().parents:
        raise InputError(f"--out {out} holds the checkpoint (--src {src}); pass a folder of its own "
                         "such as models/cosyvoice2-int8")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise InputError(f"{out} exists and is not empty; pass --force to replace it")
        others = sorted(p.name for p in out.iterdir() if (p / "manifest.json").is_file())
        if others:
            raise InputError(f"--out {out} holds other models ({', '.join(others)}); --force replaces one "
                             "model folder only: pass a folder of its own such as models/cosyvoice2-int8")


def convert(src: Path, out: Path, spec: ModelSpec, quantize: str = "none", steps: list[str] | None = None,
            force: bool = False, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``spec``'s export steps from ``src`` into ``out``; returns the manifest written there.

    ``steps`` picks a subset by name (default: all). ``force`` replaces an existing ``out``.
    ``options`` are step-specific choices (``llm_bits``, ``speech_tokenizer_int8``).
    """
    from cosyedge import __version__
    from cosyedge.export import require_torch

    require_torch()
    src, out = Path(src), Path(out)
    check_arguments(src, quantize)
    check_out(src, out, force)
    chosen = chosen_steps(spec.steps, steps)
    check_source(src, chosen, spec)
    config = read_config(src / spec.config_name)

    def finish(ctx: ExportContext) -> dict[str, Any]:
        manifest = build_manifest(ctx, __version__, chosen)
        (ctx.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return manifest

    return export_into(out, lambda tmp: ExportContext(src=src, out=tmp, config=config, spec=spec,
                                                      quantize=quantize, options=dict(options or {})),
                       spec.steps, chosen, finish)


def check_arguments(src: Path, quantize: str, label: str = "model") -> None:
    """``--quantize`` is a known choice and ``--src`` a folder (the official ``label`` directory)."""
    if quantize not in QUANTIZE_CHOICES:
        raise InputError(f"--quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {quantize!r}")
    if not src.is_dir():
        raise ModelMissingError(f"{src} is not a directory: point --src at the official {label} directory")


def chosen_steps(known: Sequence[tuple[str, ExportStep]], steps: list[str] | None) -> list[str]:
    """The names of the steps to run: ``steps`` (all of ``known`` when None), each a known one."""
    names = [name for name, _ in known]
    chosen = steps or names
    unknown = [s for s in chosen if s not in names]
    if unknown:
        raise InputError(f"unknown export step(s) {', '.join(unknown)}; known: {', '.join(names)}")
    return chosen


def export_into(out: Path, context: Callable[[Path], ExportContext], steps: Sequence[tuple[str, ExportStep]],
                chosen: list[str], finish: Callable[[ExportContext], dict[str, Any]]) -> dict[str, Any]:
    """Run the ``chosen`` steps in a temporary folder next to ``out`` (``context(folder)``), then
    ``finish`` (writes and returns the manifest), then put the folder in ``out``'s place: a failed
    conversion leaves nothing half-written under ``out``."""
    tmp = out.parent / f".{out.name}.partial"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise InputError(f"cannot write {tmp} for --out {out} ({exc.strerror or exc}); "
                         "pass a folder you can write to") from exc
    ctx = context(tmp)
    try:
        for name, step in steps:
            if name in chosen:
                logger.info("export step %s", name)
                step(ctx)
        manifest = finish(ctx)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return manifest


def build_manifest(ctx: ExportContext, version: str, steps: list[str], family: str = FAMILY,
                   model_version: int | None = None, default_rate: int = 24000,
                   licence: dict[str, str] | None = None) -> dict[str, Any]:
    """The manifest of a finished conversion (shared by the CosyVoice converters of every version)."""
    files = {}
    for name, info in sorted(ctx.files.items()):
        path = ctx.out / name
        files[name] = {**info, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    source_files = {}
    for name in sorted(p.name for p in ctx.src.iterdir() if p.is_file()):
        if name.endswith((".pt", ".yaml", ".onnx")):
            source_files[name] = sha256_file(ctx.src / name)
    return {
        **identity_fields(family, model_version or ctx.model.version),
        "format_version": FORMAT_VERSION,
        "sample_rate": ctx.runtime.get("hift", {}).get("sampling_rate", default_rate),
        "quantization": "int8" if ctx.quantize == "int8" else "fp32",
        "licence": licence or ctx.model.licence,
        "steps": steps,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "converter": f"cosyedge {version}",
        "source": {"dir": str(ctx.src.resolve()), "files": source_files},
        "config": ctx.runtime,
        "graphs": ctx.quantization,
        "files": files,
    }
