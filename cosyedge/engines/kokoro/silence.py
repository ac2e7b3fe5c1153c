"""What counts as silence at the edges of a Kokoro model call, and the cut the engine makes there.

One definition for the engine's chunks, the voice match's probes and the generator input crop's
cut-edge test (and the setup check of the crop), so that they agree on where speech starts and ends.
"""

from __future__ import annotations

import numpy as np

SILENCE_THRESHOLD = 0.003
EDGE_PAD_S = 0.04


def speech_bounds(audio: np.ndarray, sample_rate: int) -> tuple[int, int]:
    """The first and last sample (exclusive) that :func:`trim_silence` keeps."""
    loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
    if loud.size == 0:
        return 0, int(audio.size)
    pad = int(EDGE_PAD_S * sample_rate)
    return max(0, int(loud[0]) - pad), min(int(audio.size), int(loud[-1]) + pad)


def trim_silence(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Cut the model's leading/trailing near-silence, keeping a short pad so consonants survive."""
    start, end = speech_bounds(audio, sample_rate)
    return audio[start:end]
