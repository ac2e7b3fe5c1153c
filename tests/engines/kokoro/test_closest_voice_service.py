"""The closest built-in voice through the service on the real embedded model: the label and the
similarity an answer shows, an old cache entry, and a voice encoded at save time found at use time."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.audio import condition_prompt
from cosyedge.config import Settings
from cosyedge.engines.base import VoicePrompt
from cosyedge.listening.speaker import similarity
from cosyedge.service.requests import TTSRequest
from cosyedge.voices.library import CACHE_VERSION, prompt_key
from tests.helpers import reference_voices
from tests.helpers.shared_engine import SharedEngine

pytestmark = pytest.mark.slow
LINE = "The teacher opened the window, and the children ran outside to play in the warm sun."


@pytest.fixture(scope="module")
def slt_wav(tmp_path_factory) -> bytes:
    path = reference_voices.festival_voice("cmu_us_slt_arctic_hts", LINE,
                                           tmp_path_factory.mktemp("slt") / "slt.wav")
    if path is None:
        pytest.fail("festival's cmu_us_slt_arctic_hts is missing: scripts/setup.sh --dev installs "
                    "festvox-us-slt-hts", pytrace=False)
    return path.read_bytes()


@pytest.fixture
def service(make_service, kokoro_engine, kokoro_models_dir, tmp_path):
    settings = Settings(root=tmp_path, models_dir=kokoro_models_dir, idle_unload_minutes=0).validate()
    return make_service(settings, factory=lambda: SharedEngine(kokoro_engine))


def run(service, **fields):
    job = service.submit(TTSRequest(**fields))
    assert job.wait(300), "job did not finish"
    return job.outcome()


@pytest.mark.parametrize("instruct", [None, "用开心的语气说"])
def test_the_answer_names_the_voice_and_shows_the_similarity_of_the_audio_it_returns(service, slt_wav, instruct):
    """With an instruction too: its pitch effect changes the audio, and the figure follows the audio."""
    result = run(service, text="Please take out your notebooks.", consent=True, prompt_audio=slt_wav,
                 language="en", instruct=instruct)
    assert result.voice_match.startswith("closest built-in voice / 最接近的内置音色: female_")
    assert result.voice_match.code == "voice_closest_builtin"
    prompt = condition_prompt(slt_wav, max_bytes=20 << 20)
    measured = similarity(result.audio, result.sample_rate, prompt.pcm, prompt.sample_rate)
    assert result.similarity == round(measured, 4)
    assert "match" not in result.voice_match and "clone" not in result.voice_match


def test_an_old_cache_entry_gives_the_new_choice_and_its_first_answer_says_the_sound_changed(service, slt_wav):
    prompt = condition_prompt(slt_wav, max_bytes=20 << 20)
    key = prompt_key(prompt.pcm_bytes(), None, "kokoro", service.settings.model)
    old = VoicePrompt("kokoro", service.settings.model, arrays={"style": np.zeros((510, 1, 256), np.float32)},
                      meta={"method": "approximate voice match", "similarity_before": 0.42,
                            "similarity_after": 0.47, "nearest_preset": "child",
                            "adaptation": {"method": "stft", "warp": 0.94}})
    (service.prompt_cache.directory / f"{key}.v{CACHE_VERSION}.npz").write_bytes(old.to_bytes())
    first = run(service, text="Hello.", consent=True, prompt_audio=slt_wav, language="en")
    (changed,) = [n for n in first.notes if getattr(n, "code", "") == "voice_sound_changed"]
    assert changed.params["before"] == "approximate voice match"
    assert first.voice_match.params["voice"] == changed.params["voice"]
    again = run(service, text="Hello.", consent=True, prompt_audio=slt_wav, language="en")
    assert not [n for n in again.notes if getattr(n, "code", "") == "voice_sound_changed"]
    assert service.prompt_cache.refreshed == 1 and service.prompt_cache.hits == 1


def test_a_voice_encoded_at_save_time_is_the_entry_used_later(service, slt_wav, kokoro_models_dir, tmp_path, capsys):
    """`library save --encode` with a transcript, then a job on the saved voice: one encoding, found."""
    from cosyedge.cli import main

    wav = tmp_path / "lee.wav"
    wav.write_bytes(slt_wav)
    assert main(["library", "save", "Ms Lee", str(wav), "--transcript", "The teacher opened the window.",
                 "--consent", "--encode", "--prompts-dir", str(service.settings.prompts_path),
                 "--models-dir", str(kokoro_models_dir)]) == 0
    said = capsys.readouterr().out
    assert "closest built-in voice / 最接近的内置音色: female_" in said
    result = run(service, text="Hello.", voice_id="ms-lee", language="en")
    assert (service.prompt_cache.misses, service.prompt_cache.hits) == (0, 1)
    assert result.voice_match.params["voice"] in said
    assert not [n for n in result.notes if getattr(n, "code", "") == "voice_sound_changed"]


def test_a_voice_saved_while_the_model_is_loaded_is_chosen_then_and_read_from_the_cache(service, slt_wav,
                                                                                        kokoro_engine):
    """Its first use costs what a preset's does: the prompt cache has the choice, no model call made it."""
    with service.holder.use():
        pass  # the model is loaded, as on a box in use
    calls = []
    real = kokoro_engine.session.run
    kokoro_engine.session.run = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        saved = service.save_voice("Ms Lee", slt_wav, "hello", consent=True)
    finally:
        kokoro_engine.session.run = real
    assert calls == [] and service.prompt_cache.misses == 1
    assert dict(service.library.get(saved.id).sounds)["kokoro/kokoro-int8"].startswith("female_")
    result = run(service, text="Hello.", voice_id=saved.id, language="en")
    assert (service.prompt_cache.misses, service.prompt_cache.hits) == (1, 1)
    assert not [n for n in result.notes if getattr(n, "code", "") == "voice_sound_changed"]
