"""WAV encoding, atomic writes and sentence joining."""

import io
import os

import numpy as np
import pytest
import soundfile as sf

from cosyedge import audio


def test_wav_roundtrip_is_16bit_mono_and_clipped():
    x = np.array([0.0, 0.5, -0.5, 2.0, -2.0, np.nan], dtype=np.float32)
    data, sr = sf.read(io.BytesIO(audio.wav_bytes(x, 24000)), dtype="float32")
    info = sf.info(io.BytesIO(audio.wav_bytes(x, 24000)))
    assert sr == 24000 and info.channels == 1 and info.subtype == "PCM_16"
    np.testing.assert_allclose(data, [0, 0.5, -0.5, 1.0, -1.0, 0], atol=1e-4)


def test_atomic_write_leaves_no_temp_files_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.wav"
    audio.write_wav_atomic(target, np.zeros(100, np.float32), 24000)
    assert sf.info(target).frames == 100

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        audio.write_wav_atomic(target, np.ones(50, np.float32) * 0.1, 24000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]
    assert sf.info(target).frames == 100  # the old file is intact


def test_join_inserts_pauses_and_fades():
    sr = 1000
    a, b = np.ones(100, np.float32) * 0.5, np.ones(100, np.float32) * 0.5
    out = audio.join_sentences([a, np.zeros(0, np.float32), b], sr, pause_s=0.05, fade_s=0.01)
    assert len(out) == 100 + 50 + 100
    assert out[0] == 0.0 and out[99] < 0.1  # faded edges, no clicks
    assert np.all(out[100:150] == 0)
    assert out[50] == pytest.approx(0.5)


def test_join_of_nothing_is_empty():
    assert audio.join_sentences([], 24000).size == 0


def test_joiner_pieces_concatenate_to_the_join_and_carry_each_pause():
    sr = 1000
    rng = np.random.default_rng(1)
    chunks = [rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in (80, 0, 120, 60)]
    joiner = audio.Joiner(sr, pause_s=0.05)
    pieces = [joiner.piece(c, p) for c, p in zip(chunks, (0.02, None, None, None))]
    assert [p.size for p in pieces] == [80, 0, 20 + 120, 50 + 60]   # clause pause, then sentence pause
    np.testing.assert_array_equal(np.concatenate(pieces)[:80], audio.join_sentences(chunks[:1], sr))
    plain = audio.Joiner(sr, pause_s=0.05)
    np.testing.assert_array_equal(np.concatenate([plain.piece(c) for c in chunks]),
                                  audio.join_sentences(chunks, sr, pause_s=0.05))
