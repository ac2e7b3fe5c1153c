"""Self-test: is this installation able to serve? Used by `python -m cosyedge selftest` and the OTA update.

Each check returns a :class:`CheckResult` (one printed line); the installation passes only if every
check passes. The checks: every import ``python app.py`` runs as it starts (read from app.py and the
modules it reaches, :func:`startup_imports`, so no list here can fall behind the app), every model
manifest (size and sha256 of each file it lists), writable data directories, and one short sentence
synthesized by the configured engine (which also imports what the first job imports).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from cosyedge.config import Settings

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The entry point whose start the import check follows: next to the package, in the checkout.
APP_FILE = PACKAGE_DIR.parent / "app.py"
SENTENCES = {"en": "This is a short self test.", "zh": "这是一个简短的自检。",
             "ja": "これは短いセルフテストです。"}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(body: list[ast.stmt], in_function: bool = False
                  ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements Python may run in ``body``, each with whether it sits inside a
    function or class body; never those under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.orelse, in_function)
        else:
            nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from _import_nodes([c for c in children if isinstance(c, ast.stmt)
                                              or isinstance(c, ast.excepthandler)], nested)


def _package_module(name: str) -> Path | None:
    """The source file of ``cosyedge.…`` module ``name``, None when it is not one of ours."""
    parts = name.split(".")
    if parts[0] != PACKAGE_DIR.name:
        return None
    base = PACKAGE_DIR.parent.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             names: bool) -> list[str]:
    """What one import statement imports: each module (``from pkg import sub`` imports our
    submodule ``pkg.sub``) and, with ``names``, ``mod:name`` for each other name it takes."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    here = module.split(".") if is_package else module.split(".")[:-1]
    base = here[:len(here) - node.level + 1] if node.level else []
    source = ".".join(base + ([node.module] if node.module else []))
    targets = [source]
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        if _package_module(sub):
            targets.append(sub)
        elif names and alias.name != "*":
            targets.append(f"{source}:{alias.name}")
    return targets


def startup_imports(app_file: Path = APP_FILE) -> list[str]:
    """Every import ``python app.py`` may run, in the order found, read from the source (nothing is
    imported here): app.py's own imports, at module level and inside its functions (``main`` runs
    them at start), with ``mod:name`` for each name they take (an import inside a function looks the
    name up only when it runs); then, for each of our modules reached, the modules of ours it
    imports anywhere (``build_ui`` imports the studio tabs as the app starts; the engines load at the
    first job) and the other libraries it imports at module level. Libraries imported inside our
    functions are optional or loaded on first use (the recognizer, the G2P): the synthesis check
    covers the engine's. Imports under ``if TYPE_CHECKING:`` never run and are left out."""
    found: dict[str, None] = {}
    tree = ast.parse(app_file.read_text(encoding="utf-8"), str(app_file))
    queue = deque(t for node, _ in _import_nodes(tree.body)
                  for t in _targets(node, "app", is_package=False, names=True))
    while queue:
        target = queue.popleft()
        if target in found:
            continue
        found[target] = None
        path = _package_module(target)
        if path is None:
            continue
        module_tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, in_function in _import_nodes(module_tree.body):
            queue.extend(t for t in _targets(node, target, path.name == "__init__.py", names=False)
                         if not in_function or _package_module(t))
    return list(found)


def _import_target(target: str) -> None:
    module, _, name = target.partition(":")
    imported = importlib.import_module(module)
    if name and not hasattr(imported, name):
        importlib.import_module(f"{module}.{name}")  # a submodule; raises when there is none


def check_imports(modules: Iterable[str] | None = None, app_file: Path = APP_FILE) -> CheckResult:
    """Import app.py and every module it imports at start (or just ``modules``); name the ones
    that fail and why."""
    failed = []
    if modules is None:
        try:
            spec = importlib.util.spec_from_file_location("cosyedge_selftest_app", app_file)
            if spec is None or spec.loader is None:
                raise ImportError(f"no loader for {app_file}")
            spec.loader.exec_module(importlib.util.module_from_spec(spec))  # defines, starts nothing
            modules = startup_imports(app_file)
        except Exception as exc:  # a syntax error, a missing file: the app cannot start
            return CheckResult("imports", False, f"cannot import {app_file} ({type(exc).__name__}: {exc})")
    modules = list(modules)
    for target in modules:
        try:
            _import_target(target)
        except Exception as exc:  # ImportError, but also a module that crashes on import
            failed.append(f"{target} ({type(exc).__name__}: {exc})")
    if failed:
        return CheckResult("imports", False, "cannot import " + "; ".join(failed))
    return CheckResult("imports", True, f"{len(modules)} imports of the app's start work")


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
