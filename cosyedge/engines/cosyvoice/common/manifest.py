"""A converted CosyVoice model directory: ``manifest.json``, file verification and ONNX sessions.

The manifest is written by ``python -m cosyedge convert``; it names the model (family ``cosyvoice``
and its version, read by :func:`cosyedge.catalog.manifest.manifest_identity`), the format version, the
runtime constants of each part (``config``), and every file with its sha256. Loading checks that every
listed file is present (and, when asked, that its hash matches) and says which command rebuilds it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosyedge.engines.cosyvoice.versions import VERSIONS
from cosyedge.errors import ModelMissingError
from cosyedge.host.heap import trim_heap
from cosyedge.catalog.manifest import MANIFEST_NAME as MANIFEST
from cosyedge.catalog.manifest import ModelIdentity, manifest_identity, read_manifest, sha256_file

logger = logging.getLogger(__name__)

SUPPORTED_FORMATS = (1,)
#: The CosyVoice versions this runtime runs: the registry's (the schema's are in cosyedge.catalog.manifest).
RUNS_VERSIONS = tuple(VERSIONS)


def _fix_hint(directory: Path) -> str:
    if _manifest_version(directory) == 3:
        return (f"rebuild it with `python -m cosyedge convert cosyvoice3 --src <official Fun-CosyVoice3-0.5B dir> "
                f"--out {directory} --force`")
    return (f"rebuild it with `python -m cosyedge convert cosyvoice2 --src <official CosyVoice2-0.5B dir> "
            f"--out {directory} --quantize int8 --force`")


def _manifest_version(directory: Path) -> int | None:
    """The ``version`` a readable manifest states, for the rebuild hint only (None when unreadable)."""
    import json

    try:
        return int(json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8")).get("version"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None



@dataclass(frozen=True)
class ModelDir:
    """A verified model directory, its parsed manifest and its identity."""

    path: Path
    manifest: dict[str, Any]

    @property
    def identity(self) -> ModelIdentity:
        """Family, version, model id and engine name, as :mod:`cosyedge.catalog.manifest` reads them."""
        return manifest_identity(self.manifest, self.path)

    @classmethod
    def load(cls, directory: Path | str, verify_hashes: bool = False) -> "ModelDir":
        """Read and check ``manifest.json``; ``verify_hashes`` also re-hashes every file (slower)."""
        directory = Path(directory)
        manifest_path = directory / MANIFEST
        manifest = read_manifest(directory, _fix_hint(directory))
        model = cls(directory, manifest)
        identity = model.identity
        if identity.family != "cosyvoice":
            raise ModelMissingError(f"{manifest_path} is not a CosyVoice manifest; {_fix_hint(directory)}")
        if identity.version not in RUNS_VERSIONS:
            raise ModelMissingError(f"{manifest_path} is CosyVoice version {identity.version!r}; this cosyedge "
                                    f"runs CosyVoice {', '.join(map(str, RUNS_VERSIONS))}")
        if manifest.get("format_version") not in SUPPORTED_FORMATS:
            raise ModelMissingError(f"{manifest_path} has format version {manifest.get('format_version')!r}, "
                                    f"this cosyedge reads {SUPPORTED_FORMATS}; {_fix_hint(directory)}")
        files = manifest["files"]
        missing = [name for name in files if not (directory / name).is_file()]
        if missing:
            raise ModelMissingError(f"{directory} lacks {', '.join(sorted(missing))}; {_fix_hint(directory)}")
        for name, info in files.items():
            size = (directory / name).stat().st_size
            if "bytes" in info and size != info["bytes"]:
                raise ModelMissingError(f"{directory / name} has {size} bytes, the manifest says "
                                        f"{info['bytes']} (truncated or replaced); {_fix_hint(directory)}")
        if verify_hashes:
            model.verify_hashes(files)
        return model

    def verify_hashes(self, names: Iterable[str]) -> None:
        """Re-hash the listed files among ``names``; a ModelMissingError names the first that differs."""
        files = self.manifest.get("files", {})
        for name in names:
            if name in files and sha256_file(self.path / name) != files[name].get("sha256"):
                raise ModelMissingError(f"{self.path / name} does not match its sha256 in the manifest; "
                                        f"{_fix_hint(self.path)}")

    def config(self, part: str) -> dict[str, Any]:
        """The runtime constants of one part (``flow``, ``hift``, ``features``, ...)."""
        section = self.manifest.get("config", {}).get(part)
        if not isinstance(section, dict):
            raise ModelMissingError(f"{self.path / MANIFEST} has no {part!r} section; {_fix_hint(self.path)}")
        return section

    def file(self, name: str) -> Path:
        if name not in self.manifest.get("files", {}):
            raise ModelMissingError(f"{self.path / MANIFEST} does not list {name}; {_fix_hint(self.path)}")
        return self.path / name

    def session(self, name: str, threads: int = 0, release_memory: bool = True):
        """An onnxruntime CPU session for a listed graph (``threads`` 0 = onnxruntime's default).

        ``release_memory`` gives each run's activation memory back at its end (see :class:`ReleasingSession`).
        """
        path = self.file(name)
        try:
            return open_session(path, threads, release_memory)
        except Exception:
            # Sizes are checked at load, contents only here: a same-size damaged copy (bad USB stick,
            # bit rot) must say which file to replace, not show onnxruntime's protobuf error.
            self.verify_hashes([name, name + ".data"])
            raise


class ReleasingSession:
    """An onnxruntime session whose runs shrink its memory arena when they end.

    onnxruntime keeps every session's arena at its high-water mark; with the flow, HiFT and the prompt
    encoders each holding their largest activations, a request's peak would be the sum of the stages'
    peaks. Shrinking after each run (and trimming the C heap, :func:`trim_heap`) makes it the largest
    single stage (docs/bench-log/cosyvoice.md, "CosyVoice LLM"; no measurable CPU cost). Everything else is the
    wrapped session's.
    """

    def __init__(self, session) -> None:
        import onnxruntime as ort

        self._session = session
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def run(self, output_names, input_feed, run_options=None):
        try:
            return self._session.run(output_names, input_feed, run_options or self._run_options)
        finally:
            trim_heap()

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def open_session(path: Path, threads: int = 0, release_memory: bool = False):
    """CPU-only onnxruntime session with full graph optimisation and ``threads`` intra-op threads.

    ``release_memory`` wraps it in :class:`ReleasingSession` (for graphs run a few times per request;
    the LLM's per-token steps keep their arena).
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.inter_op_num_threads = 1
    if threads:
        opts.intra_op_num_threads = threads
    # Idle worker threads sleep instead of spinning: an edge box runs two jobs on two cores, and
    # spinning threads then steal the core the other job needs (measured: int8 estimator 3.8 s vs 6.2 s
    # per call on a loaded 2-core machine).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return ReleasingSession(session) if release_memory else session
