"""The package's import graph, read with the standard library's ``ast``: no import cycles in
``cosyedge/``, every import between packages allowed by the layer table of docs/ARCHITECTURE.md, and
an engine that loads and speaks without the setup-time code.

An import counts wherever it is written, at module level or inside a function, and ``import a.b.c``
(or ``from a.b.c import x``) also imports the packages ``a.b`` and ``a``: Python runs their
``__init__`` first. So a package whose ``__init__`` imports a submodule that imports its sibling
in the same package is a cycle too.
"""

from __future__ import annotations

import ast
import functools
import json
import re
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


# --- layers: which package may import which -------------------------------------------------------

ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
LAYER_HEADING = "## Layers: who may import whom"
EXCEPTIONS_HEADING = "### Exceptions the lead approved"
ROOT = "root"

#: Imports that cross the layer table today, each to be removed by the change named with it. The list
#: only shrinks: a crossing that is gone fails ``test_every_known_crossing_is_still_there`` until its
#: entry is deleted, and a new crossing is not added here: fix it, or ask the lead for an exception
#: (docs/ARCHITECTURE.md, "Exceptions").
KNOWN_CROSSINGS: dict[tuple[str, str], str] = {
}
#: What KNOWN_CROSSINGS held when it was written: it may never hold more.
KNOWN_CROSSINGS_AT_START = 10


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table_after(text: str, heading: str) -> list[list[str]]:
    """The body rows (cells) of the first markdown table after the line ``heading``, up to the next
    heading; [] when that section has no table."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    rows = []
    for line in lines[start:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append(_cells(line))
        elif rows:
            break
    return rows[2:]  # header and |---| left out


def _names(cell: str) -> set[str]:
    """The backticked names of a cell, packages without their trailing slash."""
    return {name.rstrip("/") for name in re.findall(r"`([^`]+)`", cell)}


def read_layers(text: str) -> dict[str, set[str]]:
    """Package -> the packages it may import, from the layer table (``| `pkg/` | owns | `a`, `b` |``)."""
    table = {}
    for package, _owns, may_import in _table_after(text, LAYER_HEADING):
        (name,) = _names(package)
        table[name] = _names(may_import)
    return table


def read_root_modules(text: str) -> set[str]:
    """The plain modules the layer table's ``root`` row says live directly in ``cosyedge/``."""
    for package, owns, _ in _table_after(text, LAYER_HEADING):
        if _names(package) == {ROOT}:
            return _names(owns)
    raise AssertionError(f"no `{ROOT}` row in the layer table")


def read_module_map_lines(text: str) -> dict[str, set[str]]:
    """Package -> what its line in the module map says it may import
    (``- **host/** owns ...; **may import** `root`.``)."""
    lines = {}
    for match in re.finditer(r"^- \*\*(\w+)/?\*\* owns .*\*\*may import\*\* (.*)$", text, re.MULTILINE):
        assert match[1] not in lines, f"two module-map lines for {match[1]}"
        lines[match[1]] = _names(match[2])
    return lines


def read_exceptions(text: str) -> set[tuple[str, str]]:
    """The module imports the lead allowed across the table: ``| `importer` | `imported` | why |``."""
    if EXCEPTIONS_HEADING not in text.splitlines():
        return set()
    pairs = set()
    for importer, imported, *_ in _table_after(text, EXCEPTIONS_HEADING):
        ((a,), (b,)) = _names(importer), _names(imported)
        pairs.add((a, b))
    return pairs


def package_of(module: str, files: dict[str, Path]) -> str:
    """``cosyedge.engines.kokoro.engine`` -> ``engines``; the package itself and its plain modules
    (``cosyedge.config``) -> ``root``."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and files[module].name != "__init__.py"):
        return ROOT
    return parts[1]


def crossings(graph: dict[str, set[str]], files: dict[str, Path], layers: dict[str, set[str]],
              exceptions: set[tuple[str, str]] = frozenset()) -> set[tuple[str, str]]:
    """Every (importer, imported) pair between two packages that the layer table does not allow,
    less the exceptions. An import of ``a.b.c`` also imports ``a.b``; only the deepest module of a
    crossing is named (``cosyedge.web.ui -> cosyedge.engines.base``, not also ``cosyedge.engines``)."""
    found = set()
    for importer, imported in graph.items():
        mine = package_of(importer, files)
        allowed = layers.get(mine, set()) | {mine}
        crossing = {m for m in imported if package_of(m, files) not in allowed}
        deepest = {m for m in crossing if not any(other.startswith(m + ".") for other in crossing)}
        found.update((importer, m) for m in deepest if (importer, m) not in exceptions)
    return found


def layer_cycles(layers: dict[str, set[str]]) -> list[list[str]]:
    """Packages allowed to import each other in a circle: the table is not a layering then."""
    return find_cycles({name: allowed & set(layers) for name, allowed in layers.items()})


def check_layers(root: Path, architecture: str, package: str = PACKAGE) -> set[tuple[str, str]]:
    """The forbidden imports of ``root/package`` under the layer table and exceptions of ``architecture``
    (the text of an ARCHITECTURE.md)."""
    layers, exceptions = read_layers(architecture), read_exceptions(architecture)
    return crossings(import_graph(root, package), module_files(root, package), layers, exceptions)


@functools.cache
def repo_crossings() -> frozenset[tuple[str, str]]:
    """The crossings of this checkout (read once: two tests ask)."""
    return frozenset(check_layers(REPO, ARCHITECTURE.read_text(encoding="utf-8")))


def test_the_layer_table_names_every_package_once_and_is_a_layering():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    layers = read_layers(text)
    packages = {p.parent.name for p in (REPO / PACKAGE).glob("*/__init__.py")}
    assert set(layers) == packages | {ROOT}
    assert all(allowed <= set(layers) for allowed in layers.values()), layers
    assert layer_cycles(layers) == []


def test_each_package_of_the_module_map_says_what_the_layer_table_says():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert read_module_map_lines(text) == read_layers(text)


def test_each_package_docstring_says_what_the_layer_table_says():
    """Each package's ``__init__`` ends its docstring with ``May import: a, b (...)``."""
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    for init in (REPO / PACKAGE).glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        said = re.search(r"May import: ([\w, \n]*?)\s*\(", doc)
        assert said, f"{init.relative_to(REPO)}: no 'May import:' line in the package docstring"
        assert set(said[1].replace("\n", " ").replace(",", " ").split()) == layers[init.parent.name], init


def test_the_root_row_names_the_plain_modules_of_the_package():
    plain = {p.stem for p in (REPO / PACKAGE).glob("*.py")}
    assert read_root_modules(ARCHITECTURE.read_text(encoding="utf-8")) == plain


def test_cosyedge_imports_only_what_the_layer_table_allows():
    found = repo_crossings()
    new = sorted(found - set(KNOWN_CROSSINGS))
    assert new == [], ("imports the layer table of docs/ARCHITECTURE.md does not allow:\n"
                       + "\n".join(f"{a} -> {b}" for a, b in new))


def test_every_known_crossing_is_still_there():
    found = repo_crossings()
    gone = sorted(set(KNOWN_CROSSINGS) - found)
    assert gone == [], "gone, delete from KNOWN_CROSSINGS:\n" + "\n".join(f"{a} -> {b}" for a, b in gone)
    assert len(KNOWN_CROSSINGS) <= KNOWN_CROSSINGS_AT_START


FAKE_ARCHITECTURE = """
## Layers: who may import whom

| package | owns | may import |
|---|---|---|
| `root` | `errors` | nothing |
| `low/` | the bottom | `root` |
| `high/` | the top | `root`, `low` |

### Exceptions the lead approved

| importer | imports | why |
|---|---|---|
| `pkg.low.allowed` | `pkg.high.api` | approved for the test |
"""


def test_checker_reports_forbidden_imports_at_module_level_and_inside_functions(tmp_path):
    root = write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/errors.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/base.py": "from pkg import errors\n",
        # upwards at module level, and upwards inside a function (deepest module named once)
        "pkg/low/eager.py": "from pkg.high.sub.deep import thing\n",
        "pkg/low/lazy.py": "def later():\n    from ..high import api\n    return api\n",
        # the one exception the table approves
        "pkg/low/allowed.py": "import pkg.high.api\n",
        # the root importing a package, and a package with no row
        "pkg/config.py": "from pkg.low import base\n",
        "pkg/stray/__init__.py": "from pkg import errors\n",
        "pkg/high/__init__.py": "",
        "pkg/high/api.py": "from pkg.low.base import x\nfrom pkg.errors import E\n",
        "pkg/high/sub/__init__.py": "",
        "pkg/high/sub/deep.py": "from .. import api\n",
    })
    assert check_layers(root, FAKE_ARCHITECTURE, "pkg") == {
        ("pkg.low.eager", "pkg.high.sub.deep"), ("pkg.low.lazy", "pkg.high.api"),
        ("pkg.config", "pkg.low.base"), ("pkg.stray", "pkg.errors")}
    assert read_exceptions(FAKE_ARCHITECTURE) == {("pkg.low.allowed", "pkg.high.api")}
    assert read_root_modules(FAKE_ARCHITECTURE) == {"errors"}


def test_checker_finds_a_forbidden_import_added_to_a_copy_of_the_package(tmp_path):
    """The page asking the loader for an engine inside a handler, and the engine protocol importing
    the job queue at module level: both against the real table, neither a known crossing."""
    for source in (REPO / PACKAGE).rglob("*.py"):
        copy = tmp_path / source.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    api = tmp_path / PACKAGE / "web" / "api.py"
    api.write_text(api.read_text(encoding="utf-8") + textwrap.dedent("""

        def _engine_for_page(settings):
            from cosyedge.engines.loader import load_engine
            return load_engine(settings)
        """), encoding="utf-8")
    base = tmp_path / PACKAGE / "engines" / "base.py"
    base.write_text("from cosyedge.service.jobs import JobQueue\n" + base.read_text(encoding="utf-8"),
                    encoding="utf-8")
    found = check_layers(tmp_path, ARCHITECTURE.read_text(encoding="utf-8")) - set(KNOWN_CROSSINGS)
    assert found == {("cosyedge.web.api", "cosyedge.engines.loader"),
                     ("cosyedge.engines.base", "cosyedge.service.jobs")}


def test_a_table_whose_packages_may_import_each_other_is_not_a_layering():
    assert layer_cycles({"root": set(), "a": {"root", "b"}, "b": {"root", "a"}}) == [["a", "b", "a"]]


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
