"""The service's voice-prompt path: conditioning up front, the prompt cache, saved voices, similarity."""

from __future__ import annotations

import time

import pytest

from cosyedge.audio import condition_prompt
from cosyedge.engines.base import VoicePrompt
from cosyedge.errors import AudioError, NameError_, NotFoundError
from cosyedge.service.requests import TTSRequest
from tests.test_audio_prompt import encode, speechlike

LIMIT = 20 * 1024 * 1024


def run(service, **fields):
    job = service.submit(TTSRequest(**fields))
    assert job.wait(120), "job did not finish"
    return job.outcome()


def test_bad_prompt_is_refused_before_queueing(make_service, fake_factory):
    service = make_service()
    with pytest.raises(AudioError, match=r"only 1\.\d\d s long"):
        service.submit(TTSRequest(text="hi", consent=True, prompt_audio=encode(speechlike(1.0), 24000)))
    assert fake_factory.loads == 0 and service.queue.stats().waiting == 0


def test_same_prompt_twice_encodes_once(make_service, fake_factory):
    service = make_service()
    prompt = encode(speechlike(4.0), 24000)
    first = run(service, text="Hello.", consent=True, prompt_audio=prompt, prompt_text="hi")
    run(service, text="Again.", consent=True, prompt_audio=prompt, prompt_text="hi")
    assert (service.prompt_cache.misses, service.prompt_cache.hits) == (1, 1)
    assert first.voice == "prompt audio" and first.voice_match == "closest built-in voice / 最接近的内置音色"
    assert isinstance(first.similarity, float) and -1.0 <= first.similarity <= 1.0
    assert isinstance(fake_factory.engine.calls[-1][1], VoicePrompt)


def test_abilities_are_known_from_the_manifest_before_the_first_load(make_service, web_settings,
                                                                      fake_factory, monkeypatch):
    """The page's capability notes need no model load: the manifest names the engine."""
    import json

    from cosyedge.web.ui import capability_notes

    service = make_service()
    assert service.voices()["native_clone"] is None  # no manifest: unknown
    web_settings.model_path.mkdir(parents=True, exist_ok=True)
    (web_settings.model_path / "manifest.json").write_text(json.dumps({"engine": "kokoro"}))
    voices = service.voices()
    assert (voices["native_clone"], voices["native_instruct"]) == (False, False)
    clone_note, instruct_note = capability_notes(service)
    assert "cannot clone" in clone_note and "cannot follow instructions" in instruct_note
    assert fake_factory.loads == 0
    listed = []
    monkeypatch.setattr(service.library, "list", lambda: listed.append(1) or [])
    capability_notes(service)
    assert listed == []  # the status timer's notes do not list the saved voices every tick
    (web_settings.model_path / "manifest.json").write_text(json.dumps({"engine": "cosyvoice2"}))
    assert "clones the prompt" in capability_notes(service)[0]


def test_saved_voice_by_id(make_service, fake_factory):
    fake_factory.engine_kwargs["native_clone"] = True
    service = make_service()
    conditioned = condition_prompt(encode(speechlike(4.0), 24000), max_bytes=LIMIT)
    service.library.save("Ms Lee", conditioned, "hello there", engine="fake", model_id="fake-sine")
    (saved,) = service.voices()["saved"]
    assert (saved["id"], saved["name"]) == ("ms-lee", "Ms Lee") and 3.5 < saved["duration"] < 4.5
    result = run(service, text="Hello.", voice_id="ms-lee")
    assert result.voice == "saved voice Ms Lee" and result.voice_match == "native clone"
    assert fake_factory.engine.calls[-1][1].meta["transcript"] == "hello there"
    with pytest.raises(NotFoundError, match="ms-lee"):
        service.submit(TTSRequest(text="hi", voice_id="nobody"))
    with pytest.raises(NameError_):
        service.submit(TTSRequest(text="hi", voice_id="../outputs"))


def test_ui_lists_saved_voices_and_maps_them_to_voice_id(make_service):
    from cosyedge.web.ui import SAVED_PREFIX, build_ui, voice_choices, voice_fields

    service = make_service()
    info = service.save_voice("王老师", encode(speechlike(4.0), 24000), "你好", consent=True)
    assert info.id == "wang-lao-shi"
    choices = voice_choices(service)
    assert choices[0] == ("female_1", "female_1")
    assert ("王老师 (saved / 已保存)", SAVED_PREFIX + "wang-lao-shi") in choices
    assert voice_choices(service, with_presets=False) == [("王老师 (saved / 已保存)",
                                                           "saved:wang-lao-shi")]
    assert voice_fields("saved:wang-lao-shi") == {"speaker": None, "voice_id": "wang-lao-shi"}
    assert voice_fields("male_1") == {"speaker": "male_1", "voice_id": None}
    with pytest.raises(AudioError):
        service.save_voice("empty", None, "", consent=True)
    build_ui(service)  # the page builds with saved voices present


def test_prompt_text_is_noted_as_ignored_only_where_the_engine_cannot_use_it(make_service):
    from tests.helpers.fake_engine import FakeFactory

    prompt = encode(speechlike(4.0), 24000)
    matcher = make_service()  # the fake engine, like Kokoro, cannot clone
    first = run(matcher, text="Hello.", consent=True, prompt_audio=prompt, prompt_text="hello there")
    again = run(matcher, text="Hello.", consent=True, prompt_audio=prompt, prompt_text="a different transcript")
    assert any(n.startswith("prompt_text ignored") for n in first.notes), first.notes
    # ignored for real: a new transcript does not make the same audio a new (slow) voice match
    assert (matcher.prompt_cache.misses, matcher.prompt_cache.hits) == (1, 1)
    assert again.report()["notes"] == first.notes
    cloner = make_service(factory=FakeFactory(native_clone=True))
    cloned = run(cloner, text="Hello.", consent=True, prompt_audio=prompt, prompt_text="hello there",
                 speaker="male_1")
    assert cloned.notes == ["speaker 'male_1' ignored: the voice comes from prompt_audio"]


def test_a_voice_the_instruction_replaced_gets_no_similarity(make_service):
    """"用男声" over a prompt uses a preset: a similarity of that preset to the prompt (0.10 on the
    page) measured nothing the teacher asked for."""
    service = make_service()
    prompt = encode(speechlike(4.0), 24000)
    result = run(service, text="Hello.", consent=True, prompt_audio=prompt, instruct="用男声")
    assert result.voice.startswith("male") and "instead of prompt audio" in result.voice_match
    assert result.similarity is None
    kept = run(service, text="Hello.", consent=True, prompt_audio=prompt, instruct="慢一点")
    assert kept.voice == "prompt audio" and isinstance(kept.similarity, float)


def test_cancel_while_the_voice_is_prepared_stops_at_once(make_service, fake_factory):
    """Kokoro's voice match takes ~13 s; a Cancel during it waited for its end before. Nothing
    half-encoded is cached: the same prompt is encoded again next time."""
    import time

    from cosyedge.service.jobs import JobState
    from cosyedge.service.requests import PHASE_PREPARING_VOICE

    fake_factory.engine_kwargs["encode_delay"] = 5.0
    service = make_service()
    prompt = encode(speechlike(4.0), 24000)
    job = service.submit(TTSRequest(text="Hello.", consent=True, prompt_audio=prompt))
    deadline = time.monotonic() + 10
    while job.phase != PHASE_PREPARING_VOICE:
        assert time.monotonic() < deadline, job.phase
        time.sleep(0.02)
    cancelled_at = time.monotonic()
    service.cancel(job.id)
    assert job.wait(1.0), "the voice match ran on after Cancel"
    assert job.state is JobState.CANCELLED and time.monotonic() - cancelled_at < 1.0
    fake_factory.engine.encode_delay = 0.0
    run(service, text="Again.", consent=True, prompt_audio=prompt)
    assert service.prompt_cache.misses == 2 and service.prompt_cache.hits == 0


def test_voices_say_what_each_preset_is_made_of(make_service):
    """``preset_details`` (docs/web.md): per preset and language it reads, what it is made of; here
    Kokoro's blends of packs (engines/kokoro/presets.py) on the fake engine. Empty before a load."""
    import dataclasses
    import json

    from cosyedge.engines.kokoro import presets
    from tests.helpers.fake_engine import FakeEngine

    def kokoro_like() -> FakeEngine:
        engine = FakeEngine()
        engine.capabilities = dataclasses.replace(engine.capabilities, preset_details=presets.preset_details())
        return engine

    service = make_service(factory=kokoro_like)
    assert service.voices()["preset_details"] == []
    run(service, text="Hello.")
    voices = json.loads(json.dumps(service.voices()))  # as /voices sends it
    details = voices["preset_details"]
    assert [d["name"] for d in details] == voices["presets"]
    languages = ["zh", "en", "ja"]
    assert details[3] == {"name": "male_2", "engine": "fake", "model": "fake-sine", "languages": languages,
                          "made_of": {lang: {"packs": {"jm_kumo": 0.8, "jf_gongitsune": 0.2}} for lang in languages}}
    for detail in details:
        assert detail["languages"] == languages
        assert all(sum(recipe["packs"].values()) == pytest.approx(1.0) for recipe in detail["made_of"].values())


def test_prompt_audio_and_saving_need_consent(make_service, fake_factory):
    """The one check (cosyedge.voices.consent) in the service: refused before the audio is read or
    anything queued or saved; a save with consent records when it was given."""
    from cosyedge.errors import ParameterError

    service = make_service()
    prompt = encode(speechlike(4.0), 24000)
    with pytest.raises(ParameterError) as info:
        service.submit(TTSRequest(text="hi", prompt_audio=prompt))
    assert info.value.code == "consent_required"
    with pytest.raises(ParameterError) as info:
        service.save_voice("Ms Lee", prompt, "hello")
    assert info.value.code == "consent_required" and service.library.list() == []
    assert fake_factory.loads == 0 and service.queue.stats().waiting == 0
    before = time.time()
    saved = service.save_voice("Ms Lee", prompt, "hello", consent=True)
    assert saved.consent is not None and before <= saved.consent.given_at <= time.time()
    assert service.library.get(saved.id).consent == saved.consent
    # a saved voice carries no prompt audio: its consent was given when it was saved
    assert run(service, text="Hello.", voice_id=saved.id).voice == "saved voice Ms Lee"


def test_an_old_saved_voice_speaks_as_its_closest_built_in_voice_and_says_once_that_it_changed(make_service):
    """A voice saved and used by an older version (the voice match; no ``sounds`` in its meta) resolves
    to the new choice without an error; its first answer says its sound changed, the next does not."""
    import json

    from cosyedge.engines.kokoro import closest_voice
    from tests.helpers.fake_engine import FakeEngine

    class Closest(FakeEngine):
        def encode_prompt(self, audio, sample_rate, transcript, *, cancelled=None, step=None):
            voice = super().encode_prompt(audio, sample_rate, transcript, cancelled=cancelled)
            voice.meta.update(method=closest_voice.METHOD, version=closest_voice.VERSION, preset_voice="female_2",
                              rule=closest_voice.IN_BAND)
            return voice

        def is_current(self, voice):
            return closest_voice.is_current(voice.meta)

        def sounded(self, voice):
            return closest_voice.sounded(voice.meta)

        def voice_notes(self, voice):
            return closest_voice.notes(voice.meta)

    service = make_service(factory=Closest)
    saved = service.save_voice("Ms Lee", encode(speechlike(4.0), 24000), "hello", consent=True)
    meta_path = service.library.directory / saved.id / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("sounds")
    meta["encoded_for"] = ["fake/fake-sine"]
    meta_path.write_text(json.dumps(meta))
    first = run(service, text="Hello.", voice_id=saved.id)
    assert first.voice_match == "closest built-in voice / 最接近的内置音色: female_2"
    (changed,) = [n for n in first.notes if n.code == "voice_sound_changed"]
    assert changed.params == {"before": "an earlier encoding", "voice": "female_2"}
    assert "approximate voice match" in changed
    again = run(service, text="Hello.", voice_id=saved.id)
    assert not [n for n in again.notes if n.code == "voice_sound_changed"]
    assert service.library.get(saved.id).sounds == (("fake/fake-sine", "female_2"),)
    assert service.voices()["saved"][0]["voice_match"] == "closest built-in voice / 最接近的内置音色: female_2"
