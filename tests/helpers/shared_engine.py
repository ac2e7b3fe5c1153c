"""A loaded engine lent to a Service that must not close it (a test session's or a bench's engine)."""

from __future__ import annotations

from typing import Any


class SharedEngine:
    """``engine`` behind a Service: every attribute is the engine's, ``close`` does nothing."""

    def __init__(self, engine: Any) -> None:
        self.inner = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def close(self) -> None:
        pass
