"""The streamed flow's caches: what each chunk leaves for the chunks after it, kept in numpy buffers
that onnxruntime reads in place.

A streamed sentence's memory is almost all the estimator's key/value cache: every Euler step's
attention layers keep the keys and values of every earlier frame (2.2 MiB per mel frame at
CosyVoice2's size and 10 steps in float16). One :class:`BlockedStepCache` per Euler step holds them in
the layout the converter's chunk-step graph reads (``flow.stream.kv_layout = "chunk_blocked"``):

* one buffer per step, ``[layers, 2 (key, value), chunks, 2 CFG rows, heads, chunk frames, head dim]``;
  a layer's keys (or values) so far are ``buffer[layer, 0, :chunks]``, a contiguous prefix, handed to
  the graph without a copy; a chunk's share is written once, into its slot;
* sized once per sentence from the caller's estimate (the LLM's token limit within the memory
  budget), when the first chunk needs room beyond what the buffer has (so a voice's kept prompt
  state is copied into the sentence's buffer while the LLM makes the first tokens, not before):
  ``np.empty`` pages that are never written are never resident, so room the sentence does not use
  costs address space, not memory; past the estimate it grows by :data:`GROWTH`;
* a partial chunk (the sentence's last) is computed but not kept: nothing attends to it later.

Bounded left context is cheap here: :meth:`BlockedStepCache.drop_oldest` forgets the oldest chunks
(the graph then reads ``buffer[layer, kind, start:chunks]``, still contiguous); their room is
reused, by moving the kept chunks to the front, only when the buffer would otherwise grow. A stream
bounded from its start (the ``quality`` modes' ``left_chunks``) keeps its chunks in a ring of that
many slots instead (:meth:`BlockedStepCache.ring_of`): no copy per chunk and a fixed size.

:class:`PackedStepCache` is the first streaming converter's layout (one input
``kv [frames, layers, 2, B, inner]``), kept so that models converted before the change still stream.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

#: How much a full buffer grows by. The key/value cache is most of a streamed sentence's memory, so
#: doubling would risk up to half of it unused once written; a quarter costs a few more copies.
GROWTH = 1.25


class GrowingRows:
    """A time-first buffer that appends in place (capacity grows by :data:`GROWTH`) and hands out
    its prefix."""

    def __init__(self, tail_shape: tuple[int, ...], capacity: int = 64, dtype: str = "float32") -> None:
        self._data = np.zeros((capacity, *tail_shape), dtype=dtype)
        self.length = 0

    def append(self, rows: np.ndarray) -> None:
        end = self.length + rows.shape[0]
        if end > self._data.shape[0]:
            self.reserve(max(end, int(GROWTH * self._data.shape[0]) + 1))
        self._data[self.length:end] = rows
        self.length = end

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` rows in all (one resize now instead of growing later)."""
        if rows > self._data.shape[0]:
            grown = np.zeros((rows, *self._data.shape[1:]), dtype=self._data.dtype)
            grown[:self.length] = self._data[:self.length]
            self._data = grown

    def view(self) -> np.ndarray:
        return self._data[:self.length]

    def compact(self, length: int, spare: int) -> "GrowingRows":
        """The first ``length`` rows in a buffer of their own with room for ``spare`` more."""
        out = GrowingRows(self._data.shape[1:], capacity=length + spare, dtype=str(self._data.dtype))
        out.append(self._data[:length])
        return out

    @property
    def nbytes(self) -> int:
        return self._data.nbytes


class PackedStepCache:
    """One Euler step's keys/values for graphs of the first streaming converter: a single input
    ``kv [frames, layers, 2, B, inner]``, which the graph unpacks in every layer."""

    def __init__(self, layers: int, inner: int, dtype: str, capacity_frames: int = 128,
                 rows: GrowingRows | None = None, batch: int = 2) -> None:
        self._layers, self._inner, self._dtype = layers, inner, dtype
        self._rows = rows if rows is not None else GrowingRows((layers, 2, batch, inner), capacity_frames, dtype)

    @property
    def length(self) -> int:
        """Frames held."""
        return self._rows.length

    @property
    def nbytes(self) -> int:
        return self._rows.nbytes

    def feeds(self) -> dict[str, np.ndarray]:
        return {"kv": self._rows.view()}

    def append(self, shares: list[np.ndarray]) -> None:
        """Keep a chunk's keys/values: the graph's one ``kv_out`` [frames, layers, 2, B, inner]."""
        self._rows.append(shares[0])

    def reserve(self, frames: int) -> None:
        """Room for ``frames`` frames in all, made now."""
        self._rows.reserve(frames)

    def compact(self, frames: int, spare_frames: int) -> "PackedStepCache":
        return PackedStepCache(self._layers, self._inner, self._dtype,
                               rows=self._rows.compact(frames, spare_frames))


class BlockedStepCache:
    """One Euler step's keys/values in the chunk-step graph's layout (see the module docstring).

    ``feeds()`` gives the graph its ``key_i`` / ``value_i`` inputs (views, no copy); ``append(shares)``
    stores a chunk's ``kv_out_i [2, B, heads, chunk frames, head dim]``, one per layer.
    """

    def __init__(self, layers: int, heads: int, head_dim: int, chunk_frames: int, dtype: str,
                 capacity_chunks: int = 1, batch: int = 2, ring: int = 0) -> None:
        self.chunk_frames = chunk_frames
        self._block = (batch, heads, chunk_frames, head_dim)
        self._names = [(f"key_{i}", f"value_{i}") for i in range(layers)]
        # ring > 0: at most that many chunks, each new one written over the oldest (see ring_of)
        self.ring = max(0, int(ring))
        capacity = self.ring or max(0, capacity_chunks)
        self._data = np.empty((layers, 2, capacity, *self._block), dtype=dtype)
        self._start = 0        # chunks before it are forgotten (bounded left context)
        self._end = 0          # chunks written
        self._wanted = 0       # room asked for by reserve(), made when the buffer is next full

    @property
    def chunks(self) -> int:
        """Chunks the next call attends to."""
        return min(self._end, self.ring) if self.ring else self._end - self._start

    @property
    def length(self) -> int:
        """Frames the next call attends to."""
        return self.chunks * self.chunk_frames

    @property
    def capacity(self) -> int:
        """Chunks the buffer has room for."""
        return self._data.shape[2]

    @property
    def nbytes(self) -> int:
        """The buffer's size (its unwritten room is address space, not resident memory)."""
        return self._data.nbytes

    def feeds(self) -> dict[str, np.ndarray]:
        held = slice(0, self.chunks) if self.ring else slice(self._start, self._end)
        keys, values = self._data[:, 0, held], self._data[:, 1, held]
        out = {}
        for i, (key, value) in enumerate(self._names):
            out[key], out[value] = keys[i], values[i]
        return out

    def append(self, shares: list[np.ndarray]) -> None:
        """Keep a chunk's keys/values (one array per layer); a partial chunk (the sentence's last) is
        not kept."""
        if shares[0].shape[3] != self.chunk_frames:
            return
        if self.ring:  # over the oldest chunk
            slot = self._data[:, :, self._end % self.ring]
        else:
            if self._end == self.capacity:
                self._make_room()
            slot = self._data[:, :, self._end]
        for layer, share in enumerate(shares):
            slot[layer] = share
        self._end += 1

    def reserve(self, frames: int) -> None:
        """Room for ``frames`` attended frames in all: one resize, made when the buffer is next full
        (instead of growing by steps). A ring keeps its fixed room."""
        if not self.ring:
            self._wanted = max(self._wanted, -(-int(frames) // self.chunk_frames))

    def drop_oldest(self, chunks: int) -> None:
        """Forget the ``chunks`` oldest chunks (bounded left context): later calls attend to the rest.
        Costs nothing now; their room is reused when the buffer is full."""
        self._start = min(self._end, self._start + max(0, int(chunks)))

    def ring_of(self, chunks: int) -> "BlockedStepCache":
        """A copy holding this cache's chunks in a ring of ``chunks`` slots (at most the newest
        ``chunks`` of them): from then on each chunk kept replaces the oldest, in place, so a bounded
        left context costs neither a copy per chunk nor memory that grows. The chunks are not in time
        order inside a ring: only for attention that does not depend on position (CosyVoice2's
        estimator: none of its attention layers encodes position)."""
        layers, _, _, batch, heads, _, head_dim = self._data.shape
        out = BlockedStepCache(layers, heads, head_dim, self.chunk_frames, str(self._data.dtype),
                               batch=batch, ring=chunks)
        if self.ring:  # chunk i (counted from the first written) is in slot i % ring
            slots = [i % self.ring for i in range(self._end - min(chunks, self.chunks), self._end)]
        else:
            slots = list(range(max(self._start, self._end - chunks), self._end))
        for slot in slots:
            out.append(list(self._data[:, :, slot]))
        return out

    def compact(self, frames: int, spare_frames: int) -> "BlockedStepCache":
        """The first ``frames`` frames (whole chunks) in a buffer of their own with room for
        ``spare_frames`` more."""
        chunks = frames // self.chunk_frames
        if chunks * self.chunk_frames != frames or chunks > self.chunks:
            raise ValueError(f"{frames} frames are not {self.chunk_frames}-frame chunks this cache holds")
        layers, _, _, batch, heads, _, head_dim = self._data.shape
        out = BlockedStepCache(layers, heads, head_dim, self.chunk_frames, str(self._data.dtype),
                               capacity_chunks=chunks + -(-spare_frames // self.chunk_frames), batch=batch)
        out._data[:, :, :chunks] = self._data[:, :, self._start:self._start + chunks]
        out._end = chunks
        return out

    def _make_room(self) -> None:
        if self._start:  # reuse the forgotten chunks' room before asking for more
            kept = self._data[:, :, self._start:self._end].copy()
            self._data[:, :, :kept.shape[2]] = kept
            self._end, self._start = kept.shape[2], 0
            return
        grown = int(GROWTH * self.capacity) + 1
        self._resize(self._wanted if self._wanted > self.capacity else max(self.capacity + 1, grown))

    def _resize(self, chunks: int) -> None:
        grown = np.empty((*self._data.shape[:2], chunks, *self._block), dtype=self._data.dtype)
        grown[:, :, :self.chunks] = self._data[:, :, self._start:self._end]
        self._data, self._end, self._start = grown, self.chunks, 0
        logger.debug("flow step cache resized to %d chunks", chunks)
