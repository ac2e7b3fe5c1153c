"""Name indexes over one ONNX graph: who produces and who reads each tensor, and constant values.

Shared by everything that looks for patterns in the Kokoro graph: the fused runner and the crop at
load time (``fused_runtime``, ``fused_ops``, ``crop``) and the setup-time rewrites
(``cosyedge.export.kokoro.optimize``). A leaf module: it imports nothing from cosyedge, and
onnx only when an index is built.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

logger = logging.getLogger(__name__)


class GraphIndex:
    """Producer/consumer maps and initializer values of one GraphProto, as it was when indexed.

    ``consumers`` lists each reading node once, however many of its inputs name the tensor."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {out: node for node in graph.node for out in node.output if out}
        self.consumers: dict[str, list] = {}
        for node in graph.node:
            for name in dict.fromkeys(node.input):
                if name:
                    self.consumers.setdefault(name, []).append(node)
        self._to_array = numpy_helper.to_array

    def users(self, name: str) -> list:
        """The nodes that read ``name`` (each once), in graph order."""
        return self.consumers.get(name, [])

    def only_user(self, name: str, op_type: str) -> Any:
        """The one node that reads ``name``, or ValueError unless there is exactly one, of ``op_type``."""
        users = self.users(name)
        if len(users) != 1 or users[0].op_type != op_type:
            raise ValueError(f"{name!r} feeds {[u.op_type for u in users]}, not one {op_type}")
        return users[0]

    def const(self, name: str) -> np.ndarray:
        """An initializer's value, or ValueError if ``name`` is not one."""
        if name not in self.inits:
            raise ValueError(f"{name!r} is not an initializer")
        return self._to_array(self.inits[name])

    def value(self, name: str) -> np.ndarray | None:
        """An initializer's or a Constant node's tensor value; None for a computed tensor."""
        if name in self.inits:
            return self._to_array(self.inits[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            return self._to_array(node.attribute[0].t)
        return None

    @staticmethod
    def other_input(node: Any, known: str) -> str:
        """The input of a two-input ``node`` that is not ``known``, or ValueError."""
        others = [name for name in node.input if name != known]
        if len(others) != 1:
            raise ValueError(f"{node.name} has an unexpected input list {list(node.input)}")
        return others[0]


def find_matches(graph: Any, op_type: str, prefix: str, match: Callable[[GraphIndex, Any], Any], what: str) -> list:
    """``match(index, node)`` for every ``op_type`` node under ``prefix`` (node names), in graph
    order; a node it rejects (ValueError/StopIteration: the pattern is not there) is logged and skipped."""
    g = GraphIndex(graph)
    found = []
    for node in graph.node:
        if node.op_type == op_type and node.name.startswith(prefix):
            try:
                found.append(match(g, node))
            except (ValueError, StopIteration) as exc:
                logger.debug("%s: not %s (%s)", node.name, what, exc)
    return found
