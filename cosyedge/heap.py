"""Giving freed C-heap memory back to the operating system.

glibc keeps freed blocks below its (adaptive, up to 32 MB) mmap threshold in the heap, so a released
onnxruntime session, arena chunk or parsed ONNX model stays resident until the heap is trimmed:
measured 559 of 591 MB still resident after closing a 0.5 GB speech-tokenizer session, 33 MB after
trimming. One helper for the engines and the service.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None on other C libraries."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        logger.debug("malloc_trim unavailable (not glibc): freed heap stays with the process")
        return None


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere). Takes
    about a millisecond."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
