"""onnxruntime sessions for the Kokoro runtime graph: the options tuned for a small box, the
one-session graph, and the options of the fused runner's segments (one arena shared by all).

A leaf module (no other Kokoro module is imported), used by the engine, the fused runner and its
fused steps; onnxruntime is imported when a session is made.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from cosyedge.errors import EngineError

logger = logging.getLogger(__name__)

GRAPH_OPTIMIZATION = ("disable", "basic", "extended", "all")


class Session(Protocol):
    """The part of onnxruntime.InferenceSession we use (tests pass fakes or tiny models)."""

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]: ...


def session_options(threads: int, graph_optimization: str = "all") -> Any:
    """onnxruntime SessionOptions tuned for a small box (see bench/kokoro_rtf.py for the trials);
    shared by the one-session graph and the fused runner's segments.

    ``graph_optimization`` is onnxruntime's level by name; the manifest says which one a graph wants
    (the setup-time optimized graph is loaded with "disable": it is already optimized offline).
    """
    import onnxruntime as ort

    levels = dict(zip(GRAPH_OPTIMIZATION, (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_ALL)))
    if graph_optimization not in levels:
        raise EngineError(f"unknown graph optimization {graph_optimization!r}; "
                          f"use one of {GRAPH_OPTIMIZATION}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = levels[graph_optimization]
    # Idle worker threads sleep instead of spinning: two jobs share two cores with the web server,
    # and spinning burned ~1/3 more CPU for no faster result (docs/bench-log/kokoro.md, variants table).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def make_session(onnx_path: Path, threads: int, graph_optimization: str = "all") -> Session:
    """The runtime graph in one CPU onnxruntime session (:func:`session_options`)."""
    import onnxruntime as ort

    opts = session_options(threads, graph_optimization)
    # No memory pattern: onnxruntime plans one block per input shape, and every sentence has a new
    # shape, so the arena kept growing (VmHWM 607 -> 409 MB over the bench calls, no repeat-run page
    # faults; same CPU time, bit-identical audio; bench/kokoro_gap.py, "options").
    opts.enable_mem_pattern = False
    return ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])


_shared_arena: list[bool] = []  # process-wide onnxruntime state: registered once per process


def register_shared_arena() -> None:
    """Register one CPU arena in onnxruntime's process environment for the segments to share.

    Each session otherwise grows its own arena to its largest tensors: 45 segments held ~1.5 GB
    after one call on the levers input (measured), against one arena for the whole graph."""
    import onnxruntime as ort

    if _shared_arena:
        return
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    except Exception as exc:  # noqa: BLE001 - already registered by someone else in this process
        logger.debug("shared onnxruntime arena not registered: %s", exc)
    _shared_arena.append(True)


def segment_session_options(threads: int) -> Any:
    """The engine's session options (graph already optimized offline), on the shared arena."""
    opts = session_options(threads, "disable")
    opts.add_session_config_entry("session.use_env_allocators", "1")
    opts.log_severity_level = 3
    return opts
