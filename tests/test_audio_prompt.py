"""Prompt conditioning: every bad prompt gets its own clear error; good ones come out clean."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import soundfile as sf

from cosyedge.audio import (PROMPT_ADVICE, PROMPT_KEEP_S, PROMPT_MIN_S, PROMPT_RATE,
                            PROMPT_TARGET_DBFS, condition_prompt, condition_prompt_array)
from cosyedge.errors import AudioError, PayloadTooLargeError

LIMIT = 20 * 1024 * 1024


def speechlike(seconds: float, rate: int = 24000, level: float = 0.3, seed: int = 0) -> np.ndarray:
    """A voiced, syllable-modulated signal (harmonics of a wandering f0 plus breath noise)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0, None) ** 0.5
    x = voiced * syllables + 0.05 * rng.standard_normal(t.size)
    return (level * x / np.max(np.abs(x))).astype(np.float32)


def with_silence(x: np.ndarray, rate: int, lead: float, tail: float) -> np.ndarray:
    noise = np.random.default_rng(1).standard_normal
    return np.concatenate([1e-4 * noise(int(lead * rate)), x, 1e-4 * noise(int(tail * rate))]).astype(np.float32)


def encode(x: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = "PCM_16") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


# ---- each bad prompt, its own error ---------------------------------------------------------------

def test_empty_file():
    with pytest.raises(AudioError, match="empty"):
        condition_prompt(b"", max_bytes=LIMIT, filename="a.wav")


def test_truncated_wav():
    data = encode(speechlike(5.0), 24000)
    with pytest.raises(AudioError, match="truncated"):
        condition_prompt(data[: len(data) // 2], max_bytes=LIMIT, filename="cut.wav")


def test_header_only_wav_is_truncated():
    data = encode(speechlike(5.0), 24000)
    with pytest.raises(AudioError, match="truncated"):
        condition_prompt(data[:40], max_bytes=LIMIT)


def test_8khz_is_refused():
    data = encode(speechlike(5.0, rate=8000), 8000)
    with pytest.raises(AudioError, match="8000 Hz"):
        condition_prompt(data, max_bytes=LIMIT)


def test_one_second_of_speech():
    data = encode(with_silence(speechlike(1.0), 24000, 1.0, 1.0), 24000)
    with pytest.raises(AudioError, match=r"only 1\.\d\d s long"):
        condition_prompt(data, max_bytes=LIMIT)


def test_a_prompt_just_under_the_limit_says_so_without_rounding_up():
    # 2.75 s of signal + the 0.1 s kept at each edge: just under the 3 s minimum after trimming
    data = encode(with_silence(speechlike(2.75), 24000, 0.2, 0.25), 24000)
    with pytest.raises(AudioError) as info:
        condition_prompt(data, max_bytes=LIMIT)
    message = str(info.value)
    shown = float(re.search(r"only (\d+\.\d+) s long", message).group(1))
    assert 2.9 <= shown < PROMPT_MIN_S, message  # "3.0" would contradict "at least 3 s are needed"
    assert f"at least {PROMPT_MIN_S:.0f} s" in message and PROMPT_ADVICE in message


def test_length_advice_is_the_same_in_every_length_message():
    too_long = encode(speechlike(130.0, rate=16000), 16000)
    with pytest.raises(AudioError) as long_info:
        condition_prompt(too_long, max_bytes=LIMIT)
    with pytest.raises(PayloadTooLargeError) as big_info:
        condition_prompt(b"\x00" * 2048, max_bytes=1024)
    for message in (str(long_info.value), str(big_info.value)):
        assert PROMPT_ADVICE in message, message
        assert "5-15" not in message


def test_five_minutes_is_refused():
    data = encode(speechlike(300.0, rate=16000), 16000)
    with pytest.raises(AudioError, match="300 s long"):
        condition_prompt(data, max_bytes=LIMIT)


def test_all_silence():
    data = encode(np.zeros(24000 * 5, dtype=np.float32), 24000)
    with pytest.raises(AudioError, match="silent"):
        condition_prompt(data, max_bytes=LIMIT)


def test_non_audio_bytes_named_wav():
    with pytest.raises(AudioError, match="'notes.wav' is not a recognised audio file"):
        condition_prompt(b"this is a text file, not audio\n" * 100, max_bytes=LIMIT, filename="notes.wav")


@pytest.mark.parametrize("data", [b"this is a text file, not audio\n" * 100, b"%PDF-1.4\n" + bytes(4000),
                                  b"\x89PNG\r\n\x1a\n" + bytes(4000)])
def test_unreadable_upload_is_named_in_user_terms(data):
    with pytest.raises(AudioError) as info:
        condition_prompt(data, max_bytes=LIMIT)
    message = str(info.value)
    assert "WAV, FLAC, OGG, MP3" in message, message
    assert "BytesIO" not in message and "0x" not in message and "Error opening" not in message, message


def test_nan_samples():
    x = speechlike(5.0)
    x[1000:1010] = np.nan
    data = encode(x, 24000, subtype="FLOAT")
    with pytest.raises(AudioError, match="NaN"):
        condition_prompt(data, max_bytes=LIMIT)


def test_over_size_limit_refused_before_decoding():
    # Not audio at all: the size check must come first, so the error is the size, not the format.
    with pytest.raises(PayloadTooLargeError, match="limit"):
        condition_prompt(b"\x00" * 2048, max_bytes=1024)


# ---- good prompts ---------------------------------------------------------------------------------

def test_clean_prompt_is_trimmed_resampled_and_normalized():
    src = with_silence(speechlike(6.0, rate=44100, level=0.05), 44100, 1.5, 2.0)
    stereo = np.stack([src, src * 0.9], axis=1)
    p = condition_prompt(encode(stereo, 44100), max_bytes=LIMIT, filename="t.wav")
    assert p.sample_rate == PROMPT_RATE and p.source_rate == 44100
    assert p.pcm.dtype == np.float32 and p.pcm.ndim == 1
    assert 5.8 <= p.duration_s <= 6.5, p.duration_s
    assert any("silence" in n for n in p.notes)
    rms_db = 20 * np.log10(np.sqrt(np.mean(p.pcm ** 2)))
    assert PROMPT_TARGET_DBFS - 6 < rms_db < PROMPT_TARGET_DBFS + 2
    assert np.max(np.abs(p.pcm)) <= 10 ** (-1 / 20) + 1e-4


def test_long_prompt_keeps_best_window_and_says_so():
    x = speechlike(45.0, rate=16000)
    p = condition_prompt(encode(x, 16000), max_bytes=LIMIT)
    assert abs(p.duration_s - PROMPT_KEEP_S) < 0.05
    assert any(f"best {PROMPT_KEEP_S:.1f} s" in n for n in p.notes)


@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_compressed_formats_decode(fmt, subtype):
    p = condition_prompt(encode(speechlike(4.0), 24000, fmt, subtype), max_bytes=LIMIT, filename=f"x.{fmt}")
    assert 3.5 < p.duration_s < 4.6


def test_clipping_and_low_level_are_warned():
    loud = np.clip(speechlike(5.0) * 8, -1, 1)
    assert any("clipping" in n for n in condition_prompt_array(loud, 24000).notes)
    quiet = speechlike(5.0, level=0.003)
    p = condition_prompt_array(quiet, 24000)
    assert any("very low level" in n for n in p.notes)
    assert np.max(np.abs(p.pcm)) > 0.05  # and it was brought up


def test_a_dc_offset_is_removed_so_silence_is_trimmed_and_speech_normalized():
    # a quiet laptop recording (speech peaks at 0.05) through a sound card with a 2 % DC offset
    x = with_silence(speechlike(5.0, rate=48000, level=0.05), 48000, 1.5, 1.5) + 0.02
    p = condition_prompt(encode(x, 48000), max_bytes=LIMIT, filename="laptop.wav")
    assert abs(float(np.mean(p.pcm))) < 1e-3  # was 0.09: the offset, amplified, outweighed the speech
    assert 4.9 < p.duration_s < 5.5, p.duration_s  # was 8.0: the silence at the ends was kept
    assert any("silence" in n for n in p.notes)
    speech_db = 20 * np.log10(np.sqrt(np.mean(p.pcm ** 2)))
    assert PROMPT_TARGET_DBFS - 6 < speech_db < PROMPT_TARGET_DBFS + 2  # was -26.5 dBFS (-33.6 at 5 %)


def test_a_constant_offset_alone_is_no_speech():
    with pytest.raises(AudioError, match="silent"):  # was accepted as a 5 s prompt
        condition_prompt(encode(np.full(24000 * 5, 0.1, np.float32), 24000), max_bytes=LIMIT)


def test_stereo_with_one_channel_inverted_uses_one_channel():
    # a laptop's dual microphone with one channel in inverted polarity: the plain mix is silence
    x = with_silence(speechlike(5.0, rate=48000), 48000, 0.5, 0.5)
    p = condition_prompt(encode(np.stack([x, -x], axis=1), 48000), max_bytes=LIMIT)
    assert 4.9 < p.duration_s < 5.5, p.duration_s  # was refused: "No speech found: ... silent"
    assert any("cancel out" in n for n in p.notes)
    for stereo in (np.stack([x, np.zeros_like(x)], axis=1), np.stack([x, 0.5 * x], axis=1)):
        assert not any("cancel" in n for n in condition_prompt_array(stereo, 48000).notes)


def test_int16_microphone_array():
    mic = (speechlike(5.0, rate=48000) * 32767).astype(np.int16)
    p = condition_prompt_array(mic, 48000)
    assert p.sample_rate == PROMPT_RATE and 4.5 < p.duration_s < 5.5
