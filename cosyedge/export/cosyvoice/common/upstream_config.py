"""Reading the upstream ``cosyvoice2.yaml`` (hyperpyyaml dialect) into plain data, executing nothing.

Shared by the converter (``cosyvoice2``) and its export steps (``flow``, ``hift``), which take their
sections with :func:`section`. A leaf module: it imports nothing from the export steps.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosyedge.errors import InputError

CONFIG_NAME = "cosyvoice2.yaml"


@dataclass(frozen=True)
class _Ref:
    expr: str


def read_config(path: Path) -> dict[str, Any]:
    """Parse an upstream ``cosyvoice2.yaml`` into plain data, executing nothing.

    ``!new:cls`` / ``!name:fn`` mappings become dicts with a ``"__class__"`` / ``"__name__"`` entry,
    ``!apply:`` nodes become ``{"__apply__": fn}``, and ``!ref <key> ...`` is resolved against the
    top-level keys (arithmetic such as ``<chunk_size> * <token_mel_ratio>`` is evaluated).
    """
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_tagged(kind: str):
        def construct(loader, suffix, node):  # noqa: ANN001 - PyYAML callback
            if isinstance(node, yaml.MappingNode):
                value = loader.construct_mapping(node, deep=True)
            elif isinstance(node, yaml.SequenceNode):
                value = {"args": loader.construct_sequence(node, deep=True)}
            else:
                scalar = loader.construct_scalar(node)
                value = {"args": [scalar]} if scalar != "" else {}
            return {kind: suffix, **value}
        return construct

    Loader.add_multi_constructor("!new:", construct_tagged("__class__"))
    Loader.add_multi_constructor("!name:", construct_tagged("__name__"))
    Loader.add_multi_constructor("!apply:", construct_tagged("__apply__"))
    Loader.add_constructor("!ref", lambda loader, node: _Ref(loader.construct_scalar(node)))
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise InputError(f"{path} is not a CosyVoice config (top level is not a mapping)")
    return _resolve(raw, raw)


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv}


def _evaluate(expr: str) -> Any:
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            return _ARITH[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(expr)
    return ev(ast.parse(expr, mode="eval"))


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    if isinstance(node, _Ref):
        keys = re.findall(r"<([^<>]+)>", node.expr)
        values = {k: _resolve(root[k], root) for k in keys if k in root}
        if len(values) != len(keys):
            raise InputError(f"config reference {node.expr!r} names an unknown key")
        if node.expr.strip() == f"<{keys[0]}>" and len(keys) == 1:
            return values[keys[0]]
        text = re.sub(r"<([^<>]+)>", lambda m: repr(values[m.group(1)]), node.expr)
        try:
            return _evaluate(text)
        except (ValueError, SyntaxError) as exc:
            raise InputError(f"config reference {node.expr!r} is not plain arithmetic") from exc
    if isinstance(node, dict):
        return {k: _resolve(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, root) for v in node]
    return node


def section(config: dict[str, Any], *path: str) -> dict[str, Any]:
    """A nested mapping of the parsed config, or an :class:`InputError` naming what is missing."""
    node: Any = config
    for key in path:
        if not isinstance(node, dict) or key not in node:
            raise InputError(f"{CONFIG_NAME} has no {'.'.join(path)} section")
        node = node[key]
    if not isinstance(node, dict):
        raise InputError(f"{CONFIG_NAME}: {'.'.join(path)} is not a mapping")
    return node
