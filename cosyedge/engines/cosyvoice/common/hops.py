"""One sentence, hop by hop: the LLM decodes in its own thread while flow + HiFT render the previous hop.

Shared by the CosyVoice runtimes: anything with ``push(tokens) -> [audio, ...]`` and
``finish() -> audio`` (e.g. :class:`~cosyedge.engines.cosyvoice.common.token2wav.Token2WavStream`) can be
driven. onnxruntime releases the GIL while a graph runs, so the two threads really overlap; each
side's thread count is set where its sessions are opened (:mod:`cosyedge.engines.cosyvoice.common.threads`).

Stopping: ``cancelled()`` is asked before each hop is handed out, so after a cancel at most the hop
being rendered is lost and none is emitted; closing the generator (a disconnected client) stops the
decoder thread too.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Iterable, Iterator, Protocol

import numpy as np

from cosyedge.errors import CancelledError

logger = logging.getLogger(__name__)


class TokenStream(Protocol):
    def push(self, tokens) -> list[np.ndarray]: ...  # noqa: ANN001, D102
    def finish(self) -> np.ndarray: ...  # noqa: D102


#: ``decode(stop)`` -> speech tokens one by one; it must end soon once ``stop()`` is true.
Decoder = Callable[[Callable[[], bool]], Iterable[int]]

_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def stream_hops(decode: Decoder, renderer: TokenStream, cancelled: Callable[[], bool] | None = None
                ) -> Iterator[tuple[np.ndarray, bool]]:
    """Yield (audio, is_last) for each hop as soon as it is rendered; the last is ``renderer.finish()``."""
    is_cancelled = cancelled or (lambda: False)
    stop = threading.Event()
    tokens: queue.SimpleQueue = queue.SimpleQueue()

    def run_decoder() -> None:
        try:
            for token in decode(lambda: stop.is_set() or is_cancelled()):
                tokens.put(token)
                if stop.is_set():
                    break
        except BaseException as exc:  # handed to the consumer, which raises it in its own thread
            tokens.put(_Failed(exc))
        finally:
            tokens.put(_END)

    thread = threading.Thread(target=run_decoder, name="cosyvoice-decode", daemon=True)
    thread.start()
    try:
        # The prompt's chunks whose look-ahead is still prompt need no new token: render them now,
        # while the LLM reads the prompt and makes the first hop's tokens.
        for audio in renderer.push(np.zeros(0, dtype=np.int64)):
            yield audio, False
        ended = False
        while not ended:
            batch = [tokens.get()]
            while True:  # everything decoded while the last hop was rendered
                try:
                    batch.append(tokens.get_nowait())
                except queue.Empty:
                    break
            new = []
            for item in batch:
                if item is _END:
                    ended = True
                elif isinstance(item, _Failed):
                    raise item.error
                else:
                    new.append(item)
            # One token at a time: a hop goes out as soon as its last token is in, not after the
            # later hops of the same batch are rendered too (a fast LLM hands over many at once).
            for token in new:
                for audio in renderer.push(np.asarray([token], dtype=np.int64)):
                    if is_cancelled():
                        raise CancelledError("synthesis cancelled")
                    yield audio, False
        if is_cancelled():
            raise CancelledError("synthesis cancelled")
        yield renderer.finish(), True
    finally:
        stop.set()
        thread.join()
