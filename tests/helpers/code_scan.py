"""Source scans of the package for the code checks (tests/test_errors.py, tests/test_notes.py):
every ``XError(..., code=...)`` / ``Note(..., code=...)`` call read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Collection, Iterator

import cosyedge

PACKAGE = Path(cosyedge.__file__).parent


def package_sources() -> dict[str, str]:
    """Every module of the package: path relative to the repository -> source."""
    return {str(path.relative_to(PACKAGE.parent)): path.read_text("utf-8")
            for path in sorted(PACKAGE.rglob("*.py"))}


def _literals(node: ast.expr) -> list[str | None]:
    """The strings ``node`` can be: a literal, or either literal of ``a if cond else b``; None for
    anything else (the checks can only vouch for literals)."""
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return [node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None]


def coded_calls(source: str, names: set[str]) -> Iterator[tuple[int, str, str | None]]:
    """(line, callee, code) for each call of one of ``names`` given ``code=`` (see :func:`_literals`)."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = (func.id if isinstance(func, ast.Name) else
                  func.attr if isinstance(func, ast.Attribute) else None)
        if callee not in names:
            continue
        for keyword in node.keywords:
            if keyword.arg == "code":
                for code in _literals(keyword.value):
                    yield node.lineno, callee, code


def code_problems(sources: dict[str, str], callees: set[str], listed: Callable[[str], Collection[str]],
                  unlisted: Callable[[str, str], str]) -> tuple[list[str], set[str]]:
    """(problems, codes used) over ``sources``: each call of one of ``callees`` with a ``code=``
    that is no literal, or that ``listed(callee)`` does not hold (worded by ``unlisted``)."""
    problems, used = [], set()
    for path, source in sources.items():
        for line, callee, code in coded_calls(source, callees):
            if code is None:
                problems.append(f"{path}:{line}: {callee}(code=...) is not a string literal")
            elif code not in listed(callee):
                problems.append(f"{path}:{line}: {unlisted(callee, code)}")
            else:
                used.add(code)
    return problems, used
