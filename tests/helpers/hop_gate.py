"""Test hook for CosyVoice streaming: hold a sentence's second hop until the client has the first.

A tiny model renders a whole sentence in milliseconds, so "the first hop arrived before the job
ended" cannot be seen by timing. :class:`HopGate` wraps the engine's hop generator (in-process
servers and commands only): after the first hop is handed on, the second waits until the test calls
:meth:`HopGate.release` (it saw the first hop's audio: bytes at the client, the page playing) or
the timeout passes. ``released_in_time`` then says which happened: True proves hop-by-hop delivery.
"""

from __future__ import annotations

import threading


class HopGate:
    def __init__(self, timeout_s: float = 20.0) -> None:
        self.timeout_s = timeout_s
        self._release = threading.Event()
        self.released_in_time: bool | None = None  # None: no second hop was ever made
        self.hops = 0

    def release(self) -> None:
        self._release.set()

    def install(self, monkeypatch) -> "HopGate":  # noqa: ANN001 - pytest's fixture
        from cosyedge.engines.cosyvoice.common import engine as engine_module

        real = engine_module.stream_hops

        def gated(*args, **kwargs):
            for item in real(*args, **kwargs):
                self.hops += 1
                if self.hops == 2 and self.released_in_time is None:
                    self.released_in_time = self._release.wait(self.timeout_s)
                yield item

        monkeypatch.setattr(engine_module, "stream_hops", gated)
        return self
