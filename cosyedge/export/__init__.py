"""Build time: the converter from official PyTorch checkpoints to cosyedge ONNX model directories
(``python -m cosyedge convert``), and the embedded Kokoro model's setup (``kokoro``, run by
``python -m cosyedge setup-model``).

This package is the only place in cosyedge that uses torch, and it imports it inside functions:
nothing under ``cosyedge/engines/`` imports from here.

May import: root, host, catalog, text, engines (docs/ARCHITECTURE.md, "Layers").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from cosyedge.errors import CosyedgeError, EngineError, ModelMissingError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What the converter needs beyond the runtime requirements (never needed to run a converted model).
INSTALL_COMMAND = "pip install torch==2.13.0 onnx pyyaml"


def require_torch() -> ModuleType:
    """Import torch (and check onnx/yaml), or fail with the command that installs them."""
    missing = []
    for name in ("torch", "onnx", "yaml"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise EngineError(f"the converter needs {', '.join(missing)} (export time only, not at run time); "
                          f"install with: {INSTALL_COMMAND}")
    import torch
    return torch


def read_source(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)`` for a file of the official checkpoint, or a ModelMissingError naming that file.

    A download cut short or a bad copy leaves a truncated ``.pt``/``.onnx``/``.json``; torch, onnx and
    json then fail with their own multi-line errors that do not say which file is bad.
    """
    try:
        return read(path)
    except (CosyedgeError, MemoryError):
        raise
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [""])[0].split(". ")[0][:120]
        raise ModelMissingError(f"{path} cannot be read ({type(exc).__name__}: {reason}); it is truncated "
                                f"or damaged: copy or download it again") from exc
