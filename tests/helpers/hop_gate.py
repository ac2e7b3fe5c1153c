"""Test hook for CosyVoice streaming: hold a sentence's second hop until the client has the first.

A tiny model renders a whole sentence in milliseconds, so "the first hop arrived before the job
ended" cannot be seen by timing. :class:`HopGate` wraps the engine's hop generator (in-process
servers and commands only): after the first hop is handed on, the second waits until the test calls
:meth:`HopGate.release` (it saw the first hop's audio: bytes at the client, the page playing) or
the timeout passes. ``released_in_time`` then says which happened: True proves hop-by-hop delivery.
"""

from __future__ import annotations

import threading

#: One sentence of 73 text tokens for the tiny CosyVoice-300M models: their LLM stops soon after 2
#: speech tokens per text token (146), so a streamed request gets one 120-token hop (100 + 20
#: overlap, upstream's v1 schedule) before the rest.
LONG_V1_SENTENCE = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this long "
                    "sentence and then it reads another long clause so that the speech runs for more than "
                    "one hop of tokens because the small model stops soon after twice as many speech tokens "
                    "as text tokens in its input so here are a few more plain words to make the sentence "
                    "long enough for two hops")


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
        from cosyedge.engines.cosyvoice.v1 import engine as engine_v1

        real = engine_module.stream_hops

        def gated(*args, **kwargs):
            for item in real(*args, **kwargs):
                self.hops += 1
                if self.hops == 2 and self.released_in_time is None:
                    self.released_in_time = self._release.wait(self.timeout_s)
                yield item

        for module in (engine_module, engine_v1):  # CosyVoice2/3's engine and CosyVoice-300M's
            monkeypatch.setattr(module, "stream_hops", gated)
        return self
