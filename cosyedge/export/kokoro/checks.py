"""The output checks setup runs on this machine before the manifest names a derived graph, the
fused runner or the generator input crop: each renders one fixed input (``CHECK_TOKENS`` in
``CHECK_VOICE``) and compares it with the shipped graph's audio, bit for bit (the exact passes) or
within ``SPECTRAL_TOLERANCE_DB`` of it with the same length (the approximate passes, the runner)
or over the span it returns with the whole spoken span kept (the crop).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosyedge.engines.kokoro import model_files
from cosyedge.engines.kokoro.silence import EDGE_PAD_S, SILENCE_THRESHOLD

# A fixed input: "kʲoː βa ii teŋkʲi desɨ ne. sampo ɲi ikʲi maɕoː." (Japanese) as Kokoro vocab ids.
CHECK_TOKENS = (53, 164, 57, 158, 16, 75, 43, 16, 51, 51, 16, 62, 47, 112, 53, 164, 51, 16, 46, 47, 61,
                101, 16, 56, 47, 4, 16, 61, 43, 55, 58, 57, 16, 114, 51, 16, 51, 53, 164, 51, 16, 55, 43,
                77, 57, 158, 4)
CHECK_VOICE = "jf_alpha"


def check_feeds(voices: Path) -> dict[str, np.ndarray]:
    """The model inputs for CHECK_TOKENS in CHECK_VOICE at speed 1."""
    with np.load(voices) as packs:
        style = packs[CHECK_VOICE][len(CHECK_TOKENS) - 1].reshape(1, 256).astype(np.float32)
    return {"tokens": np.array([[0, *CHECK_TOKENS, 0]], dtype=np.int64), "style": style,
            "speed": np.array([1.0], dtype=np.float32)}


def check_audio(graph: Path, voices: Path) -> np.ndarray:
    """A graph's audio for CHECK_TOKENS (1 thread, graph optimizations off, as the engine loads it)."""
    import onnxruntime as ort

    feeds = check_feeds(voices)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(graph), sess_options=opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].reshape(-1)


def _reference(shipped: Path | np.ndarray, voices: Path) -> tuple[np.ndarray, str]:
    if isinstance(shipped, np.ndarray):  # the shipped graph's check audio, computed once by the caller
        return shipped, "the shipped graph"
    return check_audio(shipped, voices), Path(shipped).name


def check_same_output(shipped: Path | np.ndarray, derived: Path, voices: Path) -> None:
    """Run ``derived`` on CHECK_TOKENS (and ``shipped``, unless its check audio is passed) with graph
    optimizations off; raise RuntimeError unless the audio is bit-identical. A CPU whose int8
    kernels saturate (u8s8 without VNNI) fails here."""
    reference, name = _reference(shipped, voices)
    audio = check_audio(derived, voices)
    if reference.shape != audio.shape or not np.array_equal(reference, audio):
        same_shape = reference.shape == audio.shape
        diff = float(np.max(np.abs(reference - audio))) if same_shape else None
        raise RuntimeError(f"{Path(derived).name} differs from {name} on the check input "
                           f"(shapes {reference.shape} vs {audio.shape}, max abs diff {diff})")


# The approximate passes move the audio as much as multiplying the decoder's half of the style vector
# by 1 + 1e-6 does (0.8-1.0 dB; docs/bench-log/kokoro.md): the vocoder amplifies any rounding change to
# that level and no further. A broken rewrite (a lost bias, a wrong norm) lands far above this bound.
SPECTRAL_TOLERANCE_DB = 2.0
_LOUD_RANGE_DB = 50.0


def spectral_distance_db(reference: np.ndarray, audio: np.ndarray, sample_rate: int = 24_000,
                         n_fft: int = 1024, hop: int = 256, bands: int = 80) -> float:
    """Mean absolute difference in dB between two clips' log band energies (power summed over
    ``bands`` mel-spaced bands per frame, the resolution of a mel spectrogram), over the
    frame-bands within 50 dB of the reference's loudest one, so that near-silent bands (where any
    change is large in dB and inaudible) do not dominate. Equal-length clips >= ``n_fft`` samples."""
    if reference.shape != audio.shape or reference.size < n_fft:
        raise ValueError(f"need two clips of the same length >= {n_fft}, got {reference.shape} and {audio.shape}")
    window = np.hanning(n_fft)
    starts = np.arange(0, reference.size - n_fft + 1, hop)
    mel_edges = np.linspace(0.0, 2595 * np.log10(1 + sample_rate / 2 / 700), bands + 1)
    edges = np.round(700 * (10 ** (mel_edges / 2595) - 1) * n_fft / sample_rate).astype(int)
    edges = np.maximum.accumulate(np.maximum(edges, np.arange(bands + 1)))  # >= 1 bin per band

    def log_bands(x: np.ndarray) -> np.ndarray:
        frames = np.stack([x[s:s + n_fft] for s in starts]).astype(np.float64) * window
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        summed = np.add.reduceat(power, edges[:-1], axis=1)
        return 10 * np.log10(summed + 1e-12)

    ref_db, db = log_bands(reference), log_bands(audio)
    loud = ref_db > ref_db.max() - _LOUD_RANGE_DB
    return float(np.mean(np.abs(db - ref_db)[loud]))


def check_close_output(shipped: Path | np.ndarray, derived: Path, voices: Path,
                       tolerance_db: float = SPECTRAL_TOLERANCE_DB) -> float:
    """Like check_same_output, but raise RuntimeError unless the audio has the same length (same
    durations) and a spectral distance within ``tolerance_db``. Returns the distance."""
    reference, name = _reference(shipped, voices)
    return check_close_audio(reference, check_audio(derived, voices), Path(derived).name, name, tolerance_db)


def check_close_audio(reference: np.ndarray, audio: np.ndarray, label: str, reference_label: str,
                      tolerance_db: float = SPECTRAL_TOLERANCE_DB) -> float:
    """check_close_output's test on two clips already computed (``label`` names ``audio``'s source
    in the error); returns the spectral distance."""
    if reference.shape != audio.shape:
        raise RuntimeError(f"{label} changes the audio length on the check input "
                           f"({audio.size} vs {reference.size} samples): the durations moved")
    if not np.all(np.isfinite(audio)):
        raise RuntimeError(f"{label} gives non-finite samples on the check input")
    distance = spectral_distance_db(reference, audio)
    if not distance <= tolerance_db:
        raise RuntimeError(f"{label} is {distance:.2f} dB from {reference_label} on the check "
                           f"input (tolerance {tolerance_db} dB)")
    return distance


def check_cropped_audio(reference: np.ndarray, audio: np.ndarray, offset: int,
                        tolerance_db: float = SPECTRAL_TOLERANCE_DB) -> float:
    """Raise RuntimeError unless the cropped ``audio`` (starting ``offset`` samples into the
    uncropped output) holds the reference's whole spoken span (what ``trim_silence`` keeps) and
    is within ``tolerance_db`` (default: SPECTRAL_TOLERANCE_DB) of the reference over the
    samples it has. Returns the spectral distance."""
    if not np.all(np.isfinite(audio)):
        raise RuntimeError("the cropped runner gives non-finite samples on the check input")
    loud = np.flatnonzero(np.abs(reference) > SILENCE_THRESHOLD)
    pad = int(EDGE_PAD_S * model_files.SAMPLE_RATE)
    first, last = max(0, int(loud[0]) - pad), min(reference.size, int(loud[-1]) + pad)
    if offset < 0 or offset > first or offset + audio.size < last:
        raise RuntimeError(f"the crop cuts speech: it returns samples {offset}-{offset + audio.size}, "
                           f"the spoken span is {first}-{last}")
    distance = spectral_distance_db(reference[offset:offset + audio.size], audio)
    if not distance <= tolerance_db:
        raise RuntimeError(f"the cropped runner is {distance:.2f} dB from the shipped graph on the check "
                           f"input (tolerance {tolerance_db} dB)")
    return distance
