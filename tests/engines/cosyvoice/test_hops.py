"""``stream_hops`` with a fake renderer: when hops are handed out against the tokens they need."""

from __future__ import annotations

import threading

import numpy as np

from cosyedge.engines.cosyvoice.common.hops import stream_hops

HOP = 25


class CountingRenderer:
    """A hop of audio for every ``HOP`` tokens pushed; records how many tokens it had at each hop.

    Its first push (the prompt's, with no tokens) waits until the decoder has made every token, as
    when the LLM outruns flow + HiFT: all the tokens are then waiting in one batch."""

    def __init__(self, decoded_all: threading.Event) -> None:
        self.decoded_all = decoded_all
        self.pushed = 0
        self.tokens_at_hop: list[int] = []

    def push(self, tokens) -> list[np.ndarray]:  # noqa: ANN001
        if not self.pushed and len(tokens) == 0:
            assert self.decoded_all.wait(10)
        out = []
        for _ in range(len(tokens)):
            self.pushed += 1
            if self.pushed % HOP == 0:
                self.tokens_at_hop.append(self.pushed)
                out.append(np.full(10, len(self.tokens_at_hop), dtype=np.float32))
        return out

    def finish(self) -> np.ndarray:
        return np.zeros(3, dtype=np.float32)


def test_a_hop_is_handed_out_before_later_tokens_are_rendered():
    decoded_all = threading.Event()

    def decode(stop):  # noqa: ANN001, ANN202
        yield from range(4 * HOP)
        decoded_all.set()

    renderer = CountingRenderer(decoded_all)
    hops = stream_hops(decode, renderer)
    audio, last = next(hops)
    assert not last and audio[0] == 1
    assert renderer.pushed == HOP, "the first hop waited for the rendering of tokens after it"
    rest = list(hops)
    assert [int(a[0]) for a, _ in rest[:-1]] == [2, 3, 4] and rest[-1][1] is True
    assert renderer.tokens_at_hop == [HOP, 2 * HOP, 3 * HOP, 4 * HOP]
