"""The streamed flow's key/value caches (numpy only): what the estimator-step graph is handed."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common.flow import StreamLayout
from cosyedge.engines.cosyvoice.common.flow_cache import BlockedStepCache, PackedStepCache

LAYERS, HEADS, HEAD_DIM, FRAMES = 3, 2, 4, 5


def _share(value: float, frames: int = FRAMES) -> list[np.ndarray]:
    """A chunk's keys/values as the graph's ``kv_out_i`` [2, B, heads, frames, head dim], one per layer."""
    out = [np.empty((2, 2, HEADS, frames, HEAD_DIM), dtype=np.float16) for _ in range(LAYERS)]
    for layer in range(LAYERS):
        for kind in range(2):
            out[layer][kind] = value + 10 * layer + kind
    return out


def _cache(capacity_chunks: int = 1) -> BlockedStepCache:
    return BlockedStepCache(LAYERS, HEADS, HEAD_DIM, FRAMES, "float16", capacity_chunks=capacity_chunks)


def test_each_layer_gets_its_chunks_as_a_view_of_the_buffer_in_order():
    cache = _cache(capacity_chunks=4)
    for chunk in range(3):
        cache.append(_share(chunk))
    feeds = cache.feeds()
    assert sorted(feeds) == sorted(f"{kind}_{i}" for i in range(LAYERS) for kind in ("key", "value"))
    key, value = feeds["key_2"], feeds["value_2"]
    assert key.shape == (3, 2, HEADS, FRAMES, HEAD_DIM) and key.flags.c_contiguous and value.flags.c_contiguous
    assert [float(key[c].flat[0]) for c in range(3)] == [20.0, 21.0, 22.0]
    assert float(value[1].flat[0]) == 22.0
    again = cache.feeds()["key_2"]
    assert np.shares_memory(key, again)  # no copy per call
    assert cache.length == 3 * FRAMES


def test_the_first_call_gets_no_past_and_a_partial_last_chunk_is_not_kept():
    cache = _cache()
    assert cache.feeds()["key_0"].shape == (0, 2, HEADS, FRAMES, HEAD_DIM)
    cache.append(_share(0))
    cache.append(_share(1, frames=FRAMES - 2))  # the sentence's last, shorter chunk
    assert cache.length == FRAMES


def test_room_reserved_is_made_once_when_needed_and_growth_keeps_the_chunks():
    cache = _cache()
    cache.reserve(6 * FRAMES)
    cache.append(_share(0))
    assert cache.capacity == 1  # made when the room is needed, not at once
    cache.append(_share(1))
    room, data = cache.nbytes, cache.feeds()["key_0"]
    assert cache.capacity == 6
    for chunk in range(2, 6):
        cache.append(_share(chunk))
    assert cache.nbytes == room and np.shares_memory(cache.feeds()["key_0"], data)
    cache.append(_share(6))  # past the reservation: grows, keeping every chunk
    assert cache.capacity > 6
    assert [float(k.flat[0]) for k in cache.feeds()["key_1"]] == [10.0 + c for c in range(7)]


def test_dropping_the_oldest_chunks_bounds_what_is_attended_and_reuses_their_room():
    cache = _cache(capacity_chunks=4)
    for chunk in range(4):
        cache.append(_share(chunk))
    cache.drop_oldest(2)
    assert [float(k.flat[0]) for k in cache.feeds()["key_0"]] == [2.0, 3.0]
    room = cache.nbytes
    cache.append(_share(4))  # full: the forgotten chunks' room is reused instead of growing
    assert cache.nbytes == room
    assert [float(k.flat[0]) for k in cache.feeds()["key_0"]] == [2.0, 3.0, 4.0]


def test_compact_keeps_the_first_chunks_with_room_for_a_chunk_more():
    cache = _cache(capacity_chunks=8)
    for chunk in range(5):
        cache.append(_share(chunk))
    kept = cache.compact(2 * FRAMES, FRAMES)
    assert kept.length == 2 * FRAMES and kept.capacity == 3
    assert [float(k.flat[0]) for k in kept.feeds()["value_0"]] == [1.0, 2.0]
    with pytest.raises(ValueError):
        cache.compact(FRAMES + 1, FRAMES)  # not whole chunks


def test_the_layout_picks_the_cache_of_the_model_s_graph():
    blocked = StreamLayout.from_dict({"kv_layout": "chunk_blocked", "attention_layers": LAYERS, "heads": HEADS,
                                      "head_dim": HEAD_DIM, "inner": HEADS * HEAD_DIM, "chunk_frames": FRAMES,
                                      "kv_dtype": "float16"})
    old = StreamLayout.from_dict({"attention_layers": LAYERS, "inner": HEADS * HEAD_DIM, "kv_dtype": "float16"})
    assert isinstance(blocked.step_cache(12), BlockedStepCache) and blocked.step_cache(12).capacity == 3
    assert isinstance(old.step_cache(12), PackedStepCache) and set(old.step_cache(12).feeds()) == {"kv"}
    # The same bytes per frame either way (keys and values, 2 CFG rows, every attention layer).
    assert blocked.cache_bytes_per_frame(10) == old.cache_bytes_per_frame(10) == LAYERS * 2 * 2 * 8 * 2 * 10


def test_a_ring_keeps_the_newest_chunks_in_place_and_copies_out_as_a_ring():
    """A bounded stream's cache (the quality modes' ``left_chunks``): a ring of N chunk slots, each new
    chunk over the oldest, the buffer never reallocated; ``ring_of`` copies the newest chunks of a
    ring or of a plain cache into a new ring."""
    ring = BlockedStepCache(LAYERS, HEADS, HEAD_DIM, FRAMES, "float16", ring=3)
    buffer = ring.feeds()["key_0"].base
    for chunk in range(5):
        ring.append(_share(chunk))
    assert ring.chunks == 3 and ring.nbytes == 3 * LAYERS * 2 * 2 * HEADS * FRAMES * HEAD_DIM * 2
    held = sorted(float(ring.feeds()["key_1"][c].flat[0]) for c in range(3))
    assert held == [12.0, 13.0, 14.0] and ring.feeds()["key_0"].base is buffer
    ring.append(_share(9, frames=2))  # a partial last chunk is not kept
    assert sorted(float(ring.feeds()["key_0"][c].flat[0]) for c in range(3)) == [2.0, 3.0, 4.0]
    smaller = ring.ring_of(2)
    assert smaller.ring == 2 and sorted(float(smaller.feeds()["key_0"][c].flat[0]) for c in range(2)) == [3.0, 4.0]
    plain = _cache(capacity_chunks=4)
    for chunk in range(4):
        plain.append(_share(chunk))
    copied = plain.ring_of(3)
    copied.append(_share(7))
    assert sorted(float(copied.feeds()["key_0"][c].flat[0]) for c in range(3)) == [2.0, 3.0, 7.0]
    assert plain.chunks == 4  # the source is left as it was
