"""What counts as silence at the edges of a Kokoro model call, and the cut the engine makes there.

One definition for the engine's chunks, the voice match's probes and the generator input crop's
cut-edge test (and the setup check of the crop), so that they agree on where speech starts and ends.
"""

from __future__ import annotations

import numpy as np

SILENCE_THRESHOLD = 0.003
EDGE_PAD_S = 0.04


def trim_silence(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Cut the model's leading/trailing near-silence, keeping a short pad so consonants survive."""
    loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
    if loud.size == 0:
        return audio
    pad = int(EDGE_PAD_S * sample_rate)
    return audio[max(0, loud[0] - pad): loud[-1] + pad]
