"""Converter from official PyTorch checkpoints to cosyedge ONNX model directories (export time only).

This package is the only place in cosyedge that uses torch, and it imports it inside functions:
nothing under ``cosyedge/engines/`` imports from here. ``python -m cosyedge convert`` is its entry point.
"""

from __future__ import annotations

import logging
from types import ModuleType

from cosyedge.errors import EngineError

logger = logging.getLogger(__name__)

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
