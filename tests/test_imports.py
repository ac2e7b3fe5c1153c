"""The package's import graph, read with the standard library's ``ast``: no import cycles in
``cosyedge/``, and an engine that loads and speaks without the setup-time code.

An import counts wherever it is written, at module level or inside a function, and ``import a.b.c``
(or ``from a.b.c import x``) also imports the packages ``a.b`` and ``a``: Python runs their
``__init__`` first. So a package whose ``__init__`` imports a submodule that imports its sibling
in the same package is a cycle too.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from collections import deque
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGE = "cosyedge"

def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root/package`` (a package by its
    ``__init__.py``)."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` -> ``[a, a.b, a.b.c]``: what importing ``a.b.c`` runs."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (source ``path``) imports anywhere in its
    source, with the packages above each (``name`` itself left out)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(m for target in targets for m in _with_parents(target) if m in known and m != name)
    return found


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it imports, for every module of ``package`` under ``root``."""
    files = module_files(root, package)
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import cycle (``[a, b, ..., a]``) for every group of modules that import each other in a
    circle (Tarjan's strongly connected components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_shortest_cycle(graph, group) for group in groups)


def _shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & group):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"{sorted(group)} is not a cycle")


# --- the package ---------------------------------------------------------------------------------


def test_cosyedge_has_no_import_cycles():
    cycles = find_cycles(import_graph(REPO))
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


# --- the checker on trees made to fail --------------------------------------------------------------


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def test_checker_finds_cycles_at_module_level_inside_functions_and_through_a_parent_package(tmp_path):
    root = write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/leaf.py": "import json\n",
        # module level, one side relative
        "pkg/a.py": "from pkg import b\nfrom pkg import leaf\n",
        "pkg/b.py": "from . import a\n",
        # one import inside a function
        "pkg/c.py": "from pkg.leaf import x\n\ndef late():\n    from pkg.d import y\n    return y\n",
        "pkg/d.py": "import pkg.c\n",
        # a package __init__ that imports its submodule, which imports a sibling (and so the package)
        "pkg/sub/__init__.py": "def load():\n    from .impl import Impl\n    return Impl\n",
        "pkg/sub/base.py": "class Base: ...\n",
        "pkg/sub/impl.py": "from pkg.sub.base import Base\n\nclass Impl(Base): ...\n",
    })
    graph = import_graph(root, "pkg")
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.d", "pkg.c"],
                                  ["pkg.sub", "pkg.sub.impl", "pkg.sub"]]
    assert graph["pkg.sub.impl"] == {"pkg", "pkg.sub", "pkg.sub.base"}


def test_checker_passes_a_tree_without_cycles(tmp_path):
    root = write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/leaf.py": "",
        "pkg/a.py": "from pkg.leaf import x\n",
        "pkg/b.py": "def f():\n    from . import a, leaf\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from ..b import f\nimport pkg.sub\n",
    })
    graph = import_graph(root, "pkg")
    assert find_cycles(graph) == []
    assert graph["pkg.sub.c"] == {"pkg", "pkg.b", "pkg.sub"} and graph["pkg.b"] == {"pkg", "pkg.a", "pkg.leaf"}


def test_checker_finds_the_old_kokoro_cycle_put_back_inside_a_function(tmp_path):
    """The cycle the run-time/build-time split removed, re-added to a copy of the package as an
    import inside a function (the fused runner asking the engine for its session options)."""
    for source in (REPO / PACKAGE).rglob("*.py"):
        copy = tmp_path / source.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    runtime = tmp_path / PACKAGE / "engines" / "kokoro" / "fused_runtime.py"
    runtime.write_text(runtime.read_text(encoding="utf-8") + textwrap.dedent("""

        def _engine_session_options(threads):
            from cosyedge.engines.kokoro.engine import make_session
            return make_session
        """), encoding="utf-8")
    cycles = find_cycles(import_graph(tmp_path))
    assert ["cosyedge.engines.kokoro.engine", "cosyedge.engines.kokoro.fused_runtime",
            "cosyedge.engines.kokoro.engine"] in cycles


# --- what the run time loads --------------------------------------------------------------------------

RUNTIME_PROBE = """
import json
import sys
from pathlib import Path

from cosyedge import cli, config
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.kokoro.engine import KokoroEngine

cli.build_parser()  # every command registered, as `python -m cosyedge serve` or `speak` does
engine = KokoroEngine.load(Path(sys.argv[1]), config.from_env({}, onnx_threads=1))
chunks = list(engine.synthesize("Hello there.", "female_1", SynthesisOptions(language="en")))
print(json.dumps({"chunks": len(chunks), "session": type(engine.session).__name__,
                  "modules": sorted(m for m in sys.modules if m.startswith("cosyedge"))}))
"""


@pytest.mark.slow
def test_loading_and_speaking_leaves_the_setup_code_unloaded(kokoro_models_dir):
    """A fresh process that loads the real embedded engine and synthesizes once has imported
    nothing under ``cosyedge.export`` (graph derivation, setup checks, the converter). It does
    import ``onnx``: the fused runner parses and partitions the runtime graph when it loads."""
    from cosyedge.engines.kokoro import model_files

    done = subprocess.run([sys.executable, "-c", RUNTIME_PROBE, str(kokoro_models_dir / model_files.MODEL_ID)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["chunks"] >= 1 and report["session"] == "FusedSession"  # the runner setup checked
    assert "cosyedge.engines.kokoro.fused_runtime" in report["modules"]
    assert [m for m in report["modules"] if m == "cosyedge.export" or m.startswith("cosyedge.export.")] == []
    assert [m for m in report["modules"] if m.rsplit(".", 1)[-1] == "optimize"] == []
