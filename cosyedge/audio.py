"""Audio plumbing shared by every engine and route: joining chunks and encoding WAV.

Prompt-audio conditioning (decode, validate, resample, trim, normalize) also lives here.
All audio inside cosyedge is mono float32 in [-1, 1]; WAV files are 16-bit PCM.
"""

from __future__ import annotations

import io
import logging
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from cosyedge.errors import AudioError, PayloadTooLargeError
from cosyedge.files import write_atomic
from cosyedge.notes import Note

logger = logging.getLogger(__name__)

SENTENCE_PAUSE_S = 0.18
CROSSFADE_S = 0.01


def clip(audio: np.ndarray) -> np.ndarray:
    """Mono float32 clipped to [-1, 1]; NaN/Inf become 0."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1), nan=0.0, posinf=0.0,
                          neginf=0.0)
    return np.clip(audio, -1.0, 1.0)


class Joiner:
    """Joins chunks one at a time, for streaming: each call returns the next *piece* of the result.

    A piece is the pause owed to the previous chunk (none before the first) followed by the chunk
    with a tiny fade at both edges, so joins never click. The pieces of a run, concatenated, are
    exactly :func:`join_sentences` of its chunks; a streaming client hears the same audio as the file.
    """

    def __init__(self, sample_rate: int, pause_s: float = SENTENCE_PAUSE_S,
                 fade_s: float = CROSSFADE_S) -> None:
        self.sample_rate = sample_rate
        self.pause_s = pause_s
        self._fade = max(1, int(fade_s * sample_rate))
        self._ramp = np.linspace(0.0, 1.0, self._fade, dtype=np.float32)
        self._owed: float | None = None  # pause after the last non-empty chunk; None before the first
        self._joined = False  # the last non-empty chunk continues seamlessly into the next

    def piece(self, chunk: np.ndarray, pause_after_s: float | None = None, continues: bool = False) -> np.ndarray:
        """The next piece for ``chunk`` (empty for an empty chunk); ``pause_after_s`` is the silence
        to put before the *next* chunk (None: the sentence pause). ``continues``: the next chunk is
        the rest of the same sentence (a streamed hop), so no fade or pause goes between them."""
        chunk = clip(chunk).copy()
        if chunk.size == 0:
            return chunk
        n = min(self._fade, chunk.size // 2)
        if n:
            if not self._joined:
                chunk[:n] *= self._ramp[:n]
            if not continues:
                chunk[-n:] *= self._ramp[:n][::-1]
        if self._owed is not None and not self._joined:
            chunk = np.concatenate([np.zeros(int(self._owed * self.sample_rate), dtype=np.float32), chunk])
        self._owed = self.pause_s if pause_after_s is None else pause_after_s
        self._joined = continues
        return chunk


def join_sentences(chunks: Iterable[np.ndarray], sample_rate: int,
                   pause_s: float = SENTENCE_PAUSE_S, fade_s: float = CROSSFADE_S) -> np.ndarray:
    """Concatenate sentence audio with a short pause; each edge gets a tiny fade so joins never click."""
    joiner = Joiner(sample_rate, pause_s, fade_s)
    parts = [p for p in (joiner.piece(c) for c in chunks) if p.size]
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


#: RIFF and data sizes written in a streamed WAV header, whose length is not known up front.
WAV_UNKNOWN_SIZE = 0xFFFFFFFF


def wav_stream_header(sample_rate: int) -> bytes:
    """A 44-byte 16-bit mono PCM WAV header for a stream of unknown length.

    Both size fields are 0xFFFFFFFF, the usual "until the end of the stream" value: ffmpeg,
    browsers, libsndfile (``soundfile``) and Python's ``wave`` read such a stream to its end
    (a reader that trusts the size sees ~2^31 frames announced and reads what arrives).
    """
    return (b"RIFF" + struct.pack("<I", WAV_UNKNOWN_SIZE) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", WAV_UNKNOWN_SIZE))


def write_wav_atomic(path: str | os.PathLike[str], audio: np.ndarray, sample_rate: int) -> Path:
    """Write a WAV so that readers only ever see a complete file (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, wav_bytes(audio, sample_rate), suffix=".wav")


# ---------------------------------------------------------------------------------------------------
# Prompt conditioning: bytes from an upload or a microphone -> clean mono float32 at PROMPT_RATE.
#
# Silence trimming is energy-based (frame RMS against a threshold set from the recording's own peak
# and noise floor), not a neural VAD: a packaged VAD (silero) would add a torch or extra model
# dependency, and a prompt is one close-mic recording where only the leading/trailing silence must
# go; pauses inside the speech are kept on purpose (they carry the speaker's rhythm).
# Loudness normalization sets the RMS of the speech frames to PROMPT_TARGET_DBFS, then caps the peak.
# Decoding is libsndfile alone (via soundfile): 1.1+ reads MP3 as well as WAV/FLAC/OGG, so no
# librosa/audioread fallback (which would need ffmpeg) is used. A source longer than 120 s is refused
# outright (a prompt is seconds long; decoding minutes of audio on the box is wasted work); 30-120 s
# keeps the best 12 s.

PROMPT_RATE = 24000
MIN_SOURCE_RATE = 16000
PROMPT_MIN_S = 3.0
#: The length to ask people for. 3 s is the enforced minimum; 10 s is the upper end of the CosyVoice
#: prompt encoder's advice (a longer prompt also lengthens every flow step's input) and of the peers'
#: (shared/research/peers.md: GPT-SoVITS enforces 3-10 s); the voice-match bench used 8-9.5 s
#: prompts (docs/bench-log/asr-and-voices.md "Voice match"). Takes up to PROMPT_MAX_S are used whole, longer
#: ones (up to PROMPT_MAX_SOURCE_S) are cut to their best PROMPT_KEEP_S.
PROMPT_BEST_S = (3, 10)
#: The one piece of length advice in every message about prompt length (the UI label says the same).
PROMPT_ADVICE = f"{PROMPT_BEST_S[0]}-{PROMPT_BEST_S[1]} s of one speaker works best"
PROMPT_ADVICE_ZH = f"单人 {PROMPT_BEST_S[0]}-{PROMPT_BEST_S[1]} 秒的录音效果最好"
PROMPT_MAX_S = 30.0
PROMPT_KEEP_S = 12.0
#: Recordings longer than this are refused before any processing (a prompt is a few seconds).
PROMPT_MAX_SOURCE_S = 120.0
PROMPT_TARGET_DBFS = -20.0
PROMPT_PEAK_DBFS = -1.0
_FRAME_S = 0.02
_HOP_S = 0.01
_EDGE_PAD_S = 0.1
_SILENT_DBFS = -60.0  # speech frames quieter than this do not count as speech at all
_LOW_LEVEL_DBFS = -40.0  # speech RMS below this earns a "very low level" warning
_CLIP_LEVEL = 0.999
_CLIP_FRACTION = 0.001
_FORMATS = "WAV, FLAC, OGG, MP3"
#: libsndfile's error number for bytes that are no audio format it knows (SF_ERR_UNRECOGNISED_FORMAT).
_SF_ERR_UNRECOGNISED_FORMAT = 1


@dataclass
class ConditionedPrompt:
    """A prompt ready for any engine: mono float32 in [-1, 1] at ``sample_rate``.

    ``notes`` are the human-readable things done or noticed on the way ("trimmed to the best
    12.0 s", "clipping detected", ...), shown to the user as warnings.
    """

    pcm: np.ndarray
    sample_rate: int = PROMPT_RATE
    source_rate: int = PROMPT_RATE
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.pcm.size / self.sample_rate

    def pcm_bytes(self) -> bytes:
        """The canonical bytes that identify this prompt (little-endian float32)."""
        return np.ascontiguousarray(self.pcm, dtype="<f4").tobytes()

    def wav_bytes(self) -> bytes:
        return wav_bytes(self.pcm, self.sample_rate)


def _check_wav_complete(data: bytes) -> None:
    """Refuse a RIFF/WAVE file whose ``data`` chunk claims more bytes than the file holds.

    libsndfile quietly reads what is there; a cut-off upload would then become a shorter prompt
    without anyone noticing, so truncation is an error that names itself.
    """
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RIFX") or data[8:12] != b"WAVE":
        return
    fmt = "<I" if data[:4] == b"RIFF" else ">I"
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos:pos + 4]
        (size,) = struct.unpack(fmt, data[pos + 4:pos + 8])
        body = pos + 8
        if chunk_id == b"data":
            if size in (0, 0xFFFFFFFF):  # streaming writers leave the size unknown
                return
            if body + size > len(data):
                raise AudioError(f"The WAV file is truncated: its header promises {size} bytes of "
                                 f"audio but only {len(data) - body} are present. Upload the whole file.",
                                 code="wav_truncated", promised=size, present=len(data) - body)
            return
        pos = body + size + (size & 1)
    raise AudioError("The WAV file is truncated or damaged: it has no audio data chunk.", code="wav_no_data")


def _unreadable(label: str, exc: Exception) -> AudioError:
    """What is wrong with a file libsndfile refused, in the user's terms (its own message names a
    Python object and says nothing a person can act on; it goes to the debug log). Told apart by
    libsndfile's error number, not its words."""
    detail = str(getattr(exc, "error_string", "") or exc)
    logger.debug("libsndfile refused %s: %s", label, detail)
    if getattr(exc, "code", None) == _SF_ERR_UNRECOGNISED_FORMAT or not detail:
        return AudioError(f"{label} is not a recognised audio file (formats accepted: {_FORMATS}). / "
                          "无法识别的音频文件（支持 WAV、FLAC、OGG、MP3）。", code="audio_not_recognised")
    return AudioError(f"{label} looks like an audio file but could not be read: it is damaged or cut off "
                      f"(formats accepted: {_FORMATS}). / 音频文件已损坏或不完整。", code="audio_unreadable")


def _decode(data: bytes, filename: str | None) -> tuple[np.ndarray, int]:
    """Decode with libsndfile (WAV/FLAC/OGG/MP3 since 1.1); returns (frames x channels, rate)."""
    import soundfile as sf

    label = f"'{filename}'" if filename else "The upload"
    _check_wav_complete(data)
    try:
        info = sf.info(io.BytesIO(data))
    except Exception as exc:  # libsndfile raises its own error types for every unreadable input
        raise _unreadable(label, exc) from None
    if info.samplerate < MIN_SOURCE_RATE:
        raise AudioError(f"{label} is sampled at {info.samplerate} Hz; prompts need at least "
                         f"{MIN_SOURCE_RATE} Hz (telephone-quality audio is too narrow to clone from).",
                         code="prompt_rate_too_low", rate=info.samplerate, minimum=MIN_SOURCE_RATE)
    if info.frames > 0 and info.frames / info.samplerate > PROMPT_MAX_SOURCE_S:
        raise AudioError(f"{label} is {info.frames / info.samplerate:.0f} s long; prompts may be at most "
                         f"{PROMPT_MAX_SOURCE_S:.0f} s. Cut a clean clip: {PROMPT_ADVICE}.",
                         code="prompt_too_long", seconds=info.frames / info.samplerate,
                         maximum=PROMPT_MAX_SOURCE_S)
    try:
        audio, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:
        raise _unreadable(label, exc) from None
    return audio, int(rate)


def condition_prompt(data: bytes, *, max_bytes: int, filename: str | None = None) -> ConditionedPrompt:
    """Validate and condition uploaded prompt audio.

    Refuses (before decoding) anything over ``max_bytes`` with :class:`PayloadTooLargeError`; every
    other problem (empty, unreadable, truncated, < 16 kHz, NaN/Inf, silent, too short, too long to
    be a prompt) is an :class:`AudioError` whose message names it.
    """
    if len(data) > max_bytes:
        raise PayloadTooLargeError(f"The prompt file is {len(data) / 1e6:.1f} MB; the limit is "
                                   f"{max_bytes / 1e6:.1f} MB. Upload a short clip instead: "
                                   f"{PROMPT_ADVICE}.", code="prompt_file_too_large",
                                   size_mb=len(data) / 1e6, limit_mb=max_bytes / 1e6)
    if not data:
        raise AudioError("The prompt file is empty (0 bytes).", code="prompt_empty_file")
    audio, rate = _decode(data, filename)
    return condition_prompt_array(audio, rate)


def condition_prompt_array(audio: np.ndarray, sample_rate: int) -> ConditionedPrompt:
    """The conditioning pipeline on already-decoded samples (frames, or frames x channels).

    Used for microphone input, which arrives as an array. Steps: finite check, mono (see
    :func:`_downmix`), rate check, clipping check, DC offset removal, resample to :data:`PROMPT_RATE`
    (soxr), trim edge silence, keep the best :data:`PROMPT_KEEP_S` of a long take, length check,
    loudness normalization.
    """
    import soxr

    x = np.asarray(audio)
    if np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float32) / float(np.iinfo(x.dtype).max)
    x = x.astype(np.float32, copy=False)
    if x.size == 0:
        raise AudioError("The prompt contains no audio samples.", code="prompt_no_samples")
    if not np.isfinite(x).all():
        raise AudioError("The prompt contains invalid samples (NaN or infinity); re-export the "
                         "recording as ordinary PCM audio.", code="prompt_invalid_samples")
    notes: list[str] = []
    if x.ndim == 2:
        # soundfile gives frames x channels; a (channels, frames) array has few rows and many columns
        x = _downmix(x if x.shape[0] >= x.shape[1] else x.T, notes)
    x = x.reshape(-1)
    if sample_rate < MIN_SOURCE_RATE:
        raise AudioError(f"The prompt is sampled at {sample_rate} Hz; prompts need at least "
                         f"{MIN_SOURCE_RATE} Hz.", code="prompt_rate_too_low", rate=sample_rate,
                         minimum=MIN_SOURCE_RATE)
    if x.size / sample_rate > PROMPT_MAX_SOURCE_S:
        raise AudioError(f"The prompt is {x.size / sample_rate:.0f} s long; prompts may be at most "
                         f"{PROMPT_MAX_SOURCE_S:.0f} s. Cut a clean clip: {PROMPT_ADVICE}.",
                         code="prompt_too_long", seconds=x.size / sample_rate, maximum=PROMPT_MAX_SOURCE_S)
    if np.mean(np.abs(x) >= _CLIP_LEVEL) > _CLIP_FRACTION:
        notes.append(Note("clipping detected: the recording is distorted; record a little further from "
                          "the microphone or lower the input gain", code="prompt_clipping"))
    # A DC offset (cheap sound cards and mics) would count as level in every frame: the silence at the
    # ends would not be trimmed and the normalization would amplify the offset instead of the speech.
    x = x - np.mean(x, dtype=np.float64).astype(np.float32)
    if sample_rate != PROMPT_RATE:
        x = soxr.resample(x, sample_rate, PROMPT_RATE, quality="HQ").astype(np.float32)
    rate = PROMPT_RATE

    db = _frame_db(x, rate)
    active = _speech_frames(db)
    if not active.any():
        raise AudioError("No speech found: the prompt is silent (or almost silent).", code="prompt_silent")
    hop = int(_HOP_S * rate)
    pad = int(_EDGE_PAD_S * rate)
    idx = np.flatnonzero(active)
    start = max(0, idx[0] * hop - pad)
    end = min(x.size, (idx[-1] + 1) * hop + int(_FRAME_S * rate) + pad)
    trimmed_s = (x.size - (end - start)) / rate
    x = x[start:end]
    active = active[idx[0]:idx[-1] + 1]
    db = db[idx[0]:idx[-1] + 1]
    if trimmed_s >= 0.5:
        notes.append(Note(f"trimmed {trimmed_s:.1f} s of silence from the ends", code="prompt_silence_trimmed",
                          seconds=trimmed_s))

    duration = x.size / rate
    if duration < PROMPT_MIN_S:
        shown = _seconds_below(duration)
        raise AudioError(f"The prompt is only {shown} s long once the silence at its ends is trimmed; "
                         f"at least {PROMPT_MIN_S:.0f} s are needed ({PROMPT_ADVICE}). / 参考音频去掉"
                         f"首尾静音后只有 {shown} 秒，至少需要 {PROMPT_MIN_S:.0f} 秒（{PROMPT_ADVICE_ZH}）。",
                         code="prompt_too_short", seconds=shown, minimum=PROMPT_MIN_S)
    if duration > PROMPT_MAX_S:
        x, db, active = _best_window(x, db, active, rate, PROMPT_KEEP_S)
        notes.append(Note(f"trimmed to the best {PROMPT_KEEP_S:.1f} s of {duration:.1f} s "
                          f"(prompts longer than {PROMPT_MAX_S:.0f} s are cut)", code="prompt_cut",
                          kept=PROMPT_KEEP_S, seconds=duration, maximum=PROMPT_MAX_S))

    speech_db = 10 * np.log10(np.mean(10 ** (db[active] / 10)) + 1e-20)
    if speech_db < _LOW_LEVEL_DBFS:
        notes.append(Note(f"very low level ({speech_db:.0f} dBFS speech): the prompt was amplified, which "
                          "also amplifies noise; record closer to the microphone", code="prompt_low_level",
                          dbfs=float(speech_db)))
    x = _normalize(x, speech_db)
    for note in notes:
        logger.info("prompt: %s", note)
    return ConditionedPrompt(pcm=x.astype(np.float32), sample_rate=rate, source_rate=sample_rate,
                             notes=notes)


def _downmix(frames: np.ndarray, notes: list[str]) -> np.ndarray:
    """Mono from frames x channels: their mean, unless the mean loses most of the channels' energy
    because they cancel out (a laptop's two microphones with one wired in inverted polarity, a known
    codec quirk; the mean of such a take is near silence): then the loudest channel alone."""
    mix = frames.mean(axis=1)
    power = np.mean(frames.astype(np.float64) ** 2, axis=0)
    if np.mean(mix.astype(np.float64) ** 2) >= 0.25 * power.mean():  # one silent channel: 0.5
        return mix
    notes.append(Note("the channels of this stereo recording cancel out when mixed (one is inverted); "
                      "the loudest channel was used", code="prompt_channels_cancel"))
    return frames[:, int(np.argmax(power))]


def _seconds_below(seconds: float) -> str:
    """``seconds`` with two decimals, rounded *down*: a length just under a limit never reads as
    the limit itself (2.996 s is "2.99", not "3.0")."""
    return f"{math.floor(seconds * 100 + 1e-9) / 100:.2f}"  # 1e-9: 1.13 is 1.1299999... in binary


def _frame_db(x: np.ndarray, rate: int) -> np.ndarray:
    """RMS level of each 20 ms frame (10 ms hop) in dBFS."""
    frame, hop = int(_FRAME_S * rate), int(_HOP_S * rate)
    if x.size < frame:
        x = np.pad(x, (0, frame - x.size))
    n = 1 + (x.size - frame) // hop
    windows = np.lib.stride_tricks.sliding_window_view(x, frame)[::hop][:n]
    power = np.mean(windows.astype(np.float64) ** 2, axis=1)
    return 10 * np.log10(power + 1e-12)


def _speech_frames(db: np.ndarray) -> np.ndarray:
    """Frames loud enough to be speech: above -60 dBFS and above a threshold between the noise
    floor (10th percentile) and the peak; the threshold never sits more than 35 dB under the peak."""
    peak = float(np.percentile(db, 99))
    floor = float(np.percentile(db, 10))
    threshold = max(_SILENT_DBFS, min(floor + 0.3 * (peak - floor), peak - 6.0), peak - 35.0)
    return db > threshold


def _best_window(x: np.ndarray, db: np.ndarray, active: np.ndarray, rate: int,
                 keep_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``keep_s`` stretch with the most speech frames (ties: the earliest)."""
    hop = int(_HOP_S * rate)
    width = int(keep_s / _HOP_S)
    counts = np.convolve(active.astype(np.int32), np.ones(width, dtype=np.int32), mode="valid")
    best = int(np.argmax(counts))
    start = best * hop
    return x[start:start + int(keep_s * rate)], db[best:best + width], active[best:best + width]


def _normalize(x: np.ndarray, speech_db: float) -> np.ndarray:
    """Scale so speech RMS is PROMPT_TARGET_DBFS, then lower the gain if the peak would pass
    PROMPT_PEAK_DBFS (no limiter: a prompt must not be distorted)."""
    gain = 10 ** ((PROMPT_TARGET_DBFS - speech_db) / 20)
    peak = float(np.max(np.abs(x))) * gain
    ceiling = 10 ** (PROMPT_PEAK_DBFS / 20)
    if peak > ceiling:
        gain *= ceiling / peak
    return np.clip(x * gain, -1.0, 1.0)
