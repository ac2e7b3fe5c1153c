"""Self-test: is this installation able to serve? Used by `python -m cosyedge selftest` and the OTA update.

Each check returns a :class:`CheckResult` (one printed line); the installation passes only if every
check passes. The checks: the runtime imports, every model manifest (size and sha256 of each file it
lists), writable data directories, and one short sentence synthesized by the configured engine.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from cosyedge.config import Settings

logger = logging.getLogger(__name__)

#: What the service needs at run time; a broken venv fails here, before a restart does.
RUNTIME_MODULES = (
    "numpy", "onnxruntime", "soundfile", "psutil",
    "cosyedge.config", "cosyedge.errors", "cosyedge.audio", "cosyedge.catalog.manifest", "cosyedge.engines.loader",
    "cosyedge.engines.base", "cosyedge.engines.kokoro.engine", "cosyedge.engines.kokoro.frontend",
    "cosyedge.ops.janitor", "cosyedge.host.thermal", "cosyedge.service.jobs", "cosyedge.service.facade",
    # the web app (gradio is the slow one: a few seconds on a small box)
    "fastapi", "uvicorn", "gradio", "cosyedge.web.auth", "cosyedge.web.api", "cosyedge.web.ui",
)
SENTENCES = {"en": "This is a short self test.", "zh": "这是一个简短的自检。",
             "ja": "これは短いセルフテストです。"}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


def check_imports(modules: Iterable[str] = RUNTIME_MODULES) -> CheckResult:
    """Import every module; name the ones that fail and why."""
    failed = []
    modules = list(modules)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # ImportError, but also a module that crashes on import
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    if failed:
        return CheckResult("imports", False, "cannot import " + "; ".join(failed))
    return CheckResult("imports", True, f"{len(modules)} modules import")


def check_manifest(model_dir: Path) -> CheckResult:
    """Every file the manifest lists exists with its size and sha256 (shared rules: cosyedge.catalog.manifest)."""
    from cosyedge.errors import ModelMissingError
    from cosyedge.catalog.manifest import manifest_identity, read_manifest, verify_files

    name = f"model {model_dir.name}"
    try:
        manifest = read_manifest(model_dir, "recreate the model directory")
        if not manifest["files"]:
            return CheckResult(name, False, f"{model_dir / 'manifest.json'} lists no files")
        root = model_dir.resolve()
        outside = [rel for rel in manifest["files"] if root not in (model_dir / rel).resolve().parents]
        if outside:
            return CheckResult(name, False, f"manifest names files outside {model_dir}: {outside}")
        verify_files(model_dir, manifest, "recreate the model directory")
        engine = manifest_identity(manifest, model_dir).engine
    except ModelMissingError as exc:
        return CheckResult(name, False, str(exc))
    except (OSError, KeyError, TypeError) as exc:
        return CheckResult(name, False, f"cannot verify {model_dir}: {exc}")
    total = sum((model_dir / rel).stat().st_size for rel in manifest["files"])
    return CheckResult(name, True, f"{engine}, {len(manifest['files'])} files, "
                                   f"{total / 1e6:.1f} MB, sha256 ok")


def check_models(models_path: Path, active: str) -> list[CheckResult]:
    """One result per model directory holding a manifest; the active model must be among them."""
    results = []
    if models_path.is_dir():
        for model_dir in sorted(p for p in models_path.iterdir() if (p / "manifest.json").is_file()):
            results.append(check_manifest(model_dir))
    if not any(r.name == f"model {active}" for r in results):
        hint = "run `python -m cosyedge setup-model`" if active == "kokoro-int8" else "convert it first"
        results.append(CheckResult(f"model {active}", False,
                                   f"no manifest at {models_path / active / 'manifest.json'}; {hint}"))
    return results


def check_writable(path: Path, label: str) -> CheckResult:
    """Create the directory if needed, then write, read back and remove a small file in it."""
    name = f"dir {label}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".selftest-", dir=path)
        try:
            os.write(fd, b"cosyedge")
            os.close(fd)
            if Path(tmp).read_bytes() != b"cosyedge":
                return CheckResult(name, False, f"{path}: read back differs")
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        return CheckResult(name, False, f"{path} is not writable: {exc.strerror or exc}")
    return CheckResult(name, True, f"{path} writable")


def check_synthesis(settings: Settings, load: Callable[[Settings], object] | None = None) -> CheckResult:
    """Load the configured engine and synthesize one short sentence; the audio must be real sound."""
    import numpy as np

    from cosyedge.engines.base import SynthesisOptions

    if load is None:
        from cosyedge.engines.loader import load_engine as load
    name = "synthesis"
    started = time.monotonic()
    engine = None
    try:
        engine = load(settings)
        languages = [lang for lang in engine.capabilities.languages if lang in SENTENCES] or ["en"]
        language = languages[0]
        presets = engine.presets()
        if not presets:
            return CheckResult(name, False, f"{engine.name}: the engine offers no voice")
        chunks = list(engine.synthesize(SENTENCES[language], presets[0],
                                        SynthesisOptions(language=language)))
        audio = np.concatenate([np.asarray(c.audio, dtype=np.float32).reshape(-1) for c in chunks]) \
            if chunks else np.zeros(0, dtype=np.float32)
        rate = chunks[0].sample_rate if chunks else engine.capabilities.sample_rate
        seconds = audio.size / rate if rate else 0.0
        if audio.size == 0:
            return CheckResult(name, False, f"{engine.name}: no audio came back")
        if not np.all(np.isfinite(audio)):
            return CheckResult(name, False, f"{engine.name}: audio holds NaN/Inf")
        peak = float(np.max(np.abs(audio)))
        if peak < 1e-3:
            return CheckResult(name, False, f"{engine.name}: audio is silent (peak {peak:.1e})")
        if not 0.2 <= seconds <= 30.0:
            return CheckResult(name, False, f"{engine.name}: {seconds:.2f} s of audio for one short sentence")
    except Exception as exc:  # any failure at all is the answer this check exists to give
        logger.debug("synthesis self-test failed", exc_info=True)
        return CheckResult(name, False, f"{type(exc).__name__}: {exc}")
    finally:
        if engine is not None:
            try:
                engine.close()
            except Exception:
                logger.warning("engine close failed during self-test", exc_info=True)
    took = time.monotonic() - started
    return CheckResult(name, True, f"{engine.name} voice {presets[0]} ({language}): {seconds:.2f} s of "
                                   f"audio, peak {peak:.2f}, in {took:.1f} s")


def run_checks(settings: Settings, synthesis: bool = True,
               load: Callable[[Settings], object] | None = None) -> list[CheckResult]:
    """All checks in order; synthesis last (it is the slow one)."""
    results = [check_imports()]
    results += check_models(settings.models_path, settings.model)
    results.append(check_writable(settings.outputs_path, "outputs"))
    results.append(check_writable(settings.prompts_path, "prompts"))
    if synthesis:
        results.append(check_synthesis(settings, load))
    return results
