"""Instructions heard in the audio: effects on synthetic signals, then the real embedded engine.

Every check compares the same text with and without the instruction, in the same run. F0 is measured
with librosa's pYIN, a different tracker from the DIO/StoneMask analysis inside effects.pitch_shift.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.instruct import effects
from cosyedge.instruct import plan as instruct
from cosyedge.service import synthesis
from cosyedge.engines.base import SynthesisOptions

SR = 24000


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def median_f0(audio: np.ndarray, sr: int = SR) -> float:
    """Median F0 (Hz) over voiced frames, by WORLD's Harvest tracker."""
    import pyworld

    f0, _ = pyworld.harvest(np.asarray(audio, dtype=np.float64), sr, f0_floor=60.0, f0_ceil=600.0)
    f0 = f0[f0 > 0]
    assert f0.size > 20, "too few voiced frames to measure F0"
    return float(np.median(f0))


def harmonic_tone(seconds: float = 2.0, f0: float = 160.0) -> np.ndarray:
    """A voice-like test signal: 20 harmonics, slow vibrato, a syllable-like amplitude envelope."""
    t = np.arange(int(seconds * SR)) / SR
    freq = f0 * (1 + 0.04 * np.sin(2 * np.pi * 3 * t))
    phase = 2 * np.pi * np.cumsum(freq) / SR
    x = sum((0.3 / k) * np.sin(k * phase) for k in range(1, 21))
    return (x * (0.4 + 0.6 * np.sin(2 * np.pi * 2 * t) ** 2)).astype(np.float32)


# --- effects on synthetic signals (fast)


@pytest.mark.parametrize("semitones", [-3.0, 2.0])
def test_pitch_shift_changes_f0_not_duration_or_level(semitones):
    x = harmonic_tone()
    y = effects.pitch_shift(x, SR, semitones)
    assert y.dtype == np.float32 and y.shape == x.shape
    ratio = median_f0(y) / median_f0(x)
    assert ratio == pytest.approx(2 ** (semitones / 12), rel=0.03)
    assert rms(y) == pytest.approx(rms(x), rel=0.1)


def test_pitch_shift_zero_is_identity_and_tiny_input_is_safe():
    x = harmonic_tone(0.5)
    np.testing.assert_array_equal(effects.pitch_shift(x, SR, 0.0), x)
    assert effects.pitch_shift(np.zeros(10, np.float32), SR, 3.0).shape == (10,)
    silent = effects.pitch_shift(np.zeros(SR, np.float32), SR, 3.0)
    assert silent.shape == (SR,) and np.all(np.isfinite(silent))


def test_pieces_cut_in_pauses_and_cover_everything():
    tone = harmonic_tone(5.0)
    gap = np.zeros(int(0.18 * SR), np.float32)
    x = np.concatenate([tone, gap, tone, gap, tone, gap, harmonic_tone(20.0)])
    spans = effects.pieces(x, SR, max_s=12.0)
    assert spans[0][0] == 0 and spans[-1][1] == x.size
    assert all(a == b for (_, a), (b, _) in zip(spans, spans[1:]))  # contiguous, no overlap
    assert all(end - start <= 12 * SR for start, end in spans)
    first_cuts = [end for _, end in spans[:3]]
    assert all(np.all(x[c - 100:c + 100] == 0) for c in first_cuts)  # cut inside a pause
    assert len(spans) == 5  # three 5 s sentences, then the pause-free 20 s cut into 12 + 8


def test_long_audio_pitch_shift_in_pieces_keeps_f0_ratio():
    tone = harmonic_tone(3.0)
    gap = np.zeros(int(0.18 * SR), np.float32)
    x = np.concatenate([tone, gap, tone, gap, tone])
    y = effects.pitch_shift(x, SR, -2.0)
    assert y.shape == x.shape
    assert np.all(y[tone.size + 10: tone.size + gap.size - 10] == 0)  # pauses stay silent
    assert median_f0(y) / median_f0(x) == pytest.approx(2 ** (-2 / 12), rel=0.03)


@pytest.mark.parametrize("gain_db", [3.0, 6.0, 12.0, 24.0])
def test_gain_is_louder_but_never_clips(gain_db):
    x = harmonic_tone() * 1.5  # peaks above 1 before any gain
    y = effects.apply_gain(x, gain_db, SR)
    assert np.max(np.abs(y)) <= effects.CEILING + 1e-6
    assert rms(y) > rms(np.clip(x, -1, 1)) * 1.2


def test_soft_gain_is_exact_and_limiter_leaves_quiet_audio_alone():
    x = harmonic_tone() * 0.5
    np.testing.assert_allclose(effects.apply_gain(x, -6.0, SR), x * 10 ** (-6 / 20), rtol=1e-5)
    np.testing.assert_array_equal(effects.limit(x, SR), x)


def test_limiter_gain_is_smooth():
    """No sample-to-sample gain jumps: the limited signal's gain curve changes slowly."""
    x = harmonic_tone()
    x[SR // 2: SR // 2 + 50] *= 8  # a sharp transient
    y = effects.limit(x, SR)
    gain = np.ones_like(x)
    nz = np.abs(x) > 1e-3
    gain[nz] = y[nz] / x[nz]
    assert np.max(np.abs(np.diff(gain[nz]))) < 0.05


# --- the real embedded engine


TEXT_ZH = "今天天气很好，我们一起去公园散步吧。"
TEXT_EN = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def kokoro(kokoro_engine):
    """The real embedded engine (session fixture in conftest: assembled from the PyPI packages)."""
    return kokoro_engine


_PLAIN: dict[tuple[int, str, str], np.ndarray] = {}


def plain(engine, text: str, voice: str = "female_1") -> np.ndarray:
    """The same text without an instruction (synthesized once per engine, text and voice)."""
    key = (id(engine), text, voice)
    if key not in _PLAIN:
        _PLAIN[key] = speak(engine, text, None, voice)[0]
    return _PLAIN[key]


def speak(engine, text: str, instruction: str | None, voice: str = "female_1"):
    """The CLI/service path: plan -> options/voice -> synthesize -> post-process."""
    options = SynthesisOptions(speed=1.0, language="auto")
    the_plan = None
    if instruction:
        the_plan = instruct.plan_for_engine(instruction, engine)
        app = instruct.apply_plan(the_plan, options, voice)
        options, voice, the_plan = app.options, app.voice, app.plan
    result = synthesis.synthesize(engine, text, voice, options, max_chars=1000)
    audio = result.audio
    if the_plan is not None:
        audio = instruct.postprocess(audio, result.sample_rate, the_plan)
    assert audio.size > 0 and np.all(np.isfinite(audio))
    return audio, the_plan


@pytest.mark.slow
@pytest.mark.parametrize("text,instruction", [(TEXT_ZH, "read it slowly"), (TEXT_EN, "慢慢地读")])
def test_slowly_is_longer(kokoro, text, instruction):
    base = plain(kokoro, text)
    slow, p = speak(kokoro, text, instruction)
    assert p.speed < 1.0
    # ×0.8 measured +26 % (zh) and +21 % (en): Kokoro rounds each phoneme's duration to whole frames,
    # so small factors (×0.9) change short English sentences by only a few percent.
    assert len(slow) > 1.12 * len(base), (len(slow), len(base))


@pytest.mark.slow
@pytest.mark.parametrize("instruction", ["loudly", "大声一点"])
def test_loudly_has_higher_rms(kokoro, instruction):
    base = plain(kokoro, TEXT_ZH)
    loud, p = speak(kokoro, TEXT_ZH, instruction)
    assert p.gain_db > 0
    assert rms(loud) > 1.3 * rms(base), (rms(loud), rms(base))
    assert np.max(np.abs(loud)) <= effects.CEILING + 1e-6
    assert len(loud) == len(base)


@pytest.mark.slow
@pytest.mark.parametrize("text,instruction", [(TEXT_ZH, "in a low voice"), (TEXT_EN, "用低沉的声音")])
def test_low_voice_has_lower_median_f0(kokoro, text, instruction):
    base = plain(kokoro, text)
    low, p = speak(kokoro, text, instruction)
    assert p.pitch_semitones < 0
    ratio = median_f0(low) / median_f0(base)
    assert ratio < 2 ** (-1.5 / 12), ratio  # asked -3 st; at least half of it must be measurable
    assert len(low) == len(base)  # pitch only, no speed change


@pytest.mark.slow
def test_unsupported_dialect_still_synthesizes_and_says_so(kokoro):
    base = plain(kokoro, TEXT_ZH)
    audio, p = speak(kokoro, TEXT_ZH, "用四川话说")
    assert p.not_supported == ("dialect: Sichuanese (not supported by this engine)",)
    assert p.applied == ()
    np.testing.assert_allclose(audio, base, atol=1e-6)  # nothing applied means nothing changed
    report = p.to_dict()
    assert report["not_supported"] and report["controls"]["speed"] == 1.0


@pytest.mark.slow
def test_voice_ask_switches_preset(kokoro):
    base = plain(kokoro, TEXT_ZH, "female_1")
    male, p = speak(kokoro, TEXT_ZH, "用男声读", voice="female_1")
    assert p.voice == "male_1"
    assert any("male_1" in line for line in p.applied)
    assert median_f0(male) < 0.7 * median_f0(base)


@pytest.mark.slow
def test_rest_tts_instruct_on_the_real_engine(web_settings, live_server, kokoro_models_dir):
    """POST /tts with ``instruct``: the plan comes back in the JSON and the audio follows it."""
    import base64
    import dataclasses
    import io

    import httpx
    import soundfile as sf

    from cosyedge.service.facade import Service

    service = Service(dataclasses.replace(web_settings, models_dir=kokoro_models_dir))
    service.start()
    try:
        server = live_server(service)

        def tts(**fields) -> tuple[dict, np.ndarray]:
            r = httpx.post(f"{server.url}/tts", json={"text": TEXT_ZH, **fields}, timeout=120)
            assert r.status_code == 200, r.text
            body = r.json()
            return body, sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")[0]

        _, base = tts()
        body, low = tts(instruct="in a low voice, 用四川话说")
        report = body["instruct"]
        assert report["applied"] == ["pitch −3.0 st ('low voice')"]
        assert report["not_supported"] == ["dialect: Sichuanese (not supported by this engine)"]
        assert report["controls"]["pitch_semitones"] == -3.0 and report["controls"]["native"] is False
        assert len(low) == len(base)
        assert median_f0(low) / median_f0(base) < 2 ** (-1.5 / 12)
    finally:
        service.close()
