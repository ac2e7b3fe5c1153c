"""The streamed flow's growing cache buffers (numpy only)."""

from __future__ import annotations

import numpy as np

from cosyedge.engines.cosyvoice.common.flow import _Growing


def test_the_growing_cache_keeps_its_room_near_what_it_holds():
    buffer = _Growing((3,), capacity=16, dtype="float16")
    rows = np.arange(50 * 3, dtype=np.float16).reshape(50, 3)
    for start in range(0, 650, 50):  # a 13-chunk sentence, one 50-frame chunk at a time
        buffer.append(rows + start)
    assert buffer.length == 650
    np.testing.assert_array_equal(buffer.view()[::50, 0], np.arange(0, 650, 50))
    assert buffer.nbytes <= 1.25 * 650 * 3 * 2 + 50 * 3 * 2  # not up to twice what it holds
