"""Audio plumbing shared by every engine and route: joining chunks and encoding WAV.

Prompt-audio conditioning (decode, validate, resample, trim, normalize) also lives here.
All audio inside cosyedge is mono float32 in [-1, 1]; WAV files are 16-bit PCM.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterable

import numpy as np

logger = logging.getLogger(__name__)

SENTENCE_PAUSE_S = 0.18
CROSSFADE_S = 0.01


def clip(audio: np.ndarray) -> np.ndarray:
    """Mono float32 clipped to [-1, 1]; NaN/Inf become 0."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1), nan=0.0, posinf=0.0,
                          neginf=0.0)
    return np.clip(audio, -1.0, 1.0)


def join_sentences(chunks: Iterable[np.ndarray], sample_rate: int,
                   pause_s: float = SENTENCE_PAUSE_S, fade_s: float = CROSSFADE_S) -> np.ndarray:
    """Concatenate sentence audio with a short pause; each edge gets a tiny fade so joins never click."""
    fade = max(1, int(fade_s * sample_rate))
    pause = np.zeros(int(pause_s * sample_rate), dtype=np.float32)
    ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
    parts: list[np.ndarray] = []
    for chunk in chunks:
        chunk = clip(chunk).copy()
        if chunk.size == 0:
            continue
        n = min(fade, chunk.size // 2)
        if n:
            chunk[:n] *= ramp[:n]
            chunk[-n:] *= ramp[:n][::-1]
        if parts:
            parts.append(pause)
        parts.append(chunk)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def to_pcm16(audio: np.ndarray) -> np.ndarray:
    """Float [-1, 1] to int16 with rounding."""
    return np.round(clip(audio) * 32767.0).astype(np.int16)


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """A complete 16-bit mono WAV file in memory."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, to_pcm16(audio), sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def write_wav_atomic(path: str | os.PathLike[str], audio: np.ndarray, sample_rate: int) -> Path:
    """Write a WAV so that readers only ever see a complete file (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = wav_bytes(audio, sample_rate)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".wav", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
