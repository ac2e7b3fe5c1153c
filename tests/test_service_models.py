"""Service: the model list, switching (refused while jobs run or wait, one model in memory, lazy
load after), the page's history records, and the models a saved voice is encoded for."""

from __future__ import annotations

import dataclasses
import io
import threading

import numpy as np
import pytest
import soundfile as sf

from cosyedge.errors import ConflictError, InputError, NotFoundError
from cosyedge.service.facade import Service
from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.model_folders import COSYVOICE_LICENCE, make_model
from tests.helpers.waiting import wait_until


class GatedEngine(FakeEngine):
    """A fake engine whose synthesis waits for ``gate``: a job stays running as long as a test needs."""

    def __init__(self, gate: threading.Event, model: str) -> None:
        super().__init__()
        self.gate = gate
        self.model_id = model

    def synthesize(self, *args, **kwargs):
        assert self.gate.wait(10), "the test never opened the gate"
        yield from super().synthesize(*args, **kwargs)


@pytest.fixture
def studio(make_service, web_settings):
    """A service over models/ holding kokoro-int8 (served) and cosyvoice2-int8, on gated fake engines
    that remember which model each load was for."""
    make_model(web_settings.models_path, "kokoro-int8")
    make_model(web_settings.models_path, "cosyvoice2-int8", engine="cosyvoice2", licence=COSYVOICE_LICENCE)
    gate = threading.Event()
    gate.set()
    engines: list[GatedEngine] = []
    holder: list[Service] = []

    def factory() -> GatedEngine:
        engines.append(GatedEngine(gate, holder[0].engine_settings().model))
        return engines[-1]

    service = make_service(factory=factory)
    holder.append(service)
    service.gate, service.engines = gate, engines
    return service


def test_models_lists_the_usable_folders_and_the_one_served(studio):
    listing = studio.models()
    assert listing["current"] == "kokoro-int8" and listing["loaded"] is False
    by_id = {model["id"]: model for model in listing["models"]}
    assert by_id["kokoro-int8"]["current"] and not by_id["cosyvoice2-int8"]["current"]
    assert by_id["cosyvoice2-int8"]["capabilities"]["native_clone"] is True
    assert "Apache-2.0" in by_id["cosyvoice2-int8"]["licence"]


def test_switching_releases_the_engine_and_the_next_job_loads_the_new_model(studio):
    job = studio.submit(TTSRequest(text="On Kokoro."))
    assert job.wait(10)
    first = studio.engines[0]
    assert first.model_id == "kokoro-int8" and studio.holder.loaded
    info = studio.switch_model("cosyvoice2-int8")
    assert info.engine == "cosyvoice2"
    assert first.closed and not studio.holder.loaded  # released before the next model is chosen
    assert studio.settings.model == "cosyvoice2-int8" and studio.models()["current"] == "cosyvoice2-int8"
    assert studio.model_engine_name() == "cosyvoice2"  # from the new manifest, before any load
    assert studio.abilities() == (True, True)
    assert len(studio.engines) == 1  # lazy: nothing loads at the switch
    job = studio.submit(TTSRequest(text="On CosyVoice."))
    assert job.wait(10)
    assert [engine.model_id for engine in studio.engines] == ["kokoro-int8", "cosyvoice2-int8"]
    assert job.outcome().model_id == "cosyvoice2-int8"


def test_switching_is_refused_while_a_job_runs_or_waits_and_nothing_is_lost(studio, web_settings):
    studio.gate.clear()
    running = studio.submit(TTSRequest(text="Running."))
    waiting = [studio.submit(TTSRequest(text=f"Waiting {i}.")) for i in range(web_settings.concurrency)]
    wait_until(lambda: studio.queue.stats().running == web_settings.concurrency, what="both slots busy")
    assert studio.queue.stats().waiting == 1
    with pytest.raises(ConflictError) as busy:
        studio.switch_model("cosyvoice2-int8")
    error = busy.value
    assert error.code == "model_switch_busy" and error.http_status == 409
    assert (error.params["running"], error.params["waiting"]) == (2, 1)
    assert "nothing was cancelled" in error.message
    assert studio.settings.model == "kokoro-int8"
    studio.gate.set()
    for job in [running, *waiting]:
        assert job.wait(10)
        assert job.outcome().model_id == "kokoro-int8"  # every job finished on the model it was sent to
    assert studio.switch_model("cosyvoice2-int8").id == "cosyvoice2-int8"  # once they are done


def test_switching_is_refused_while_a_request_is_being_checked(studio, monkeypatch):
    checking, release = threading.Event(), threading.Event()
    real_prepare = studio.prepare

    def slow_prepare(request):
        checking.set()
        assert release.wait(10)
        return real_prepare(request)

    monkeypatch.setattr(studio, "prepare", slow_prepare)
    submitted: list = []
    thread = threading.Thread(target=lambda: submitted.append(studio.submit(TTSRequest(text="x."), owner="ui:a")))
    thread.start()
    assert checking.wait(10)
    with pytest.raises(ConflictError):
        studio.switch_model("cosyvoice2-int8")
    release.set()
    thread.join(10)
    assert submitted[0].wait(10) and submitted[0].outcome().model_id == "kokoro-int8"


def test_switching_to_an_unknown_or_unusable_model_changes_nothing(studio, web_settings):
    make_model(web_settings.models_path, "odd", engine="vits")
    with pytest.raises(NotFoundError):
        studio.switch_model("nope")
    with pytest.raises(InputError):
        studio.switch_model("odd")
    assert studio.settings.model == "kokoro-int8"


def test_a_page_output_gets_a_history_record_that_goes_with_its_wav(make_service, web_settings):
    from cosyedge.ops.janitor import JanitorPolicy, sweep

    service = make_service()
    text = "A lesson about the moon. " * 10
    job = service.submit(TTSRequest(text=text, keep_file=True))
    assert job.wait(10)
    result = job.outcome()
    api_job = service.submit(TTSRequest(text="Not from the page."))  # REST: no file, no record
    assert api_job.wait(10)
    entries = service.history()
    assert [entry.job_id for entry in entries] == [result.job_id]
    entry = entries[0]
    assert entry.text_start.startswith("A lesson about the moon.") and entry.text_start.endswith("…")
    assert entry.text_chars == len(text) and entry.voice == "female_1"
    assert (entry.engine, entry.model) == ("fake", "fake-sine")
    assert entry.duration_s == pytest.approx(result.duration, abs=1e-3) and entry.path == result.path
    # the janitor's rules decide: the record is part of the output it removes
    removed = sweep(web_settings.outputs_path, now=entry.created + 3600,
                    policy=JanitorPolicy(max_age_s=60, min_age_s=0))
    assert {path.name for path in removed} == {f"{result.job_id}.{kind}" for kind in ("wav", "json", "srt", "vtt")}
    assert service.history() == []
    assert service.retention() == {"max_age_hours": 24.0, "max_total_mb": 1024.0, "max_files": 500}


def wav_bytes(seconds: float = 4.0, rate: int = 24000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def test_a_saved_voice_records_the_models_it_was_encoded_for(studio):
    info = studio.save_voice("Ms Lee", wav_bytes(), "hello", consent=True)
    assert info.encoded_for == ()
    studio.prompt_cache.max_entries = 0  # the cache keeps nothing: the voice's own record must
    job = studio.submit(TTSRequest(text="First.", voice_id=info.id))
    assert job.wait(10), job.outcome()
    assert studio.saved_voices()[0].encoded_for == ("fake/kokoro-int8",)
    assert len(studio.prompt_cache) == 0
    studio.switch_model("cosyvoice2-int8")
    for _ in range(2):  # the second use adds nothing
        job = studio.submit(TTSRequest(text="Second.", voice_id=info.id))
        assert job.wait(10), job.outcome()
    assert studio.saved_voices()[0].encoded_for == ("fake/kokoro-int8", "fake/cosyvoice2-int8")
    renamed = studio.rename_voice(info.id, "Ms Lee senior")
    assert renamed.encoded_for == ("fake/kokoro-int8", "fake/cosyvoice2-int8")
    exported = studio.export_voice(renamed.id)
    studio.delete_voice(renamed.id)
    assert studio.saved_voices() == []
    done = studio.import_voice(exported)
    back = done.info
    # the id came along; the encodings would too, but this cache kept none to carry
    assert (back.id, back.name) == (info.id, "Ms Lee senior")
    assert back.encoded_for == done.reused == ()
    assert back.consent is not None and back.consent == renamed.consent == info.consent
    pcm, rate = studio.voice_recording(back.id)
    assert rate == 24000 and len(pcm) == pytest.approx(4.0 * 24000, rel=0.05)


def test_rename_and_import_refuse_a_preset_name(studio):
    """The My voices tab's rename and import go through these: a preset name is refused there too."""
    info = studio.save_voice("Ms Lee", wav_bytes(), "hello", consent=True)
    exported = studio.export_voice(info.id)
    for name in studio.presets()[:2]:
        with pytest.raises(InputError) as refused:
            studio.rename_voice(info.id, name)
        assert refused.value.code == "voice_name_preset"
        with pytest.raises(InputError) as refused:
            studio.import_voice(exported, name=name.replace("_", " ").upper())
        assert refused.value.code == "voice_name_preset"
    assert [(v.id, v.name) for v in studio.saved_voices()] == [("ms-lee", "Ms Lee")]


def test_settings_stay_as_given_apart_from_the_model(studio, web_settings):
    studio.switch_model("cosyvoice2-int8")
    assert studio.settings == dataclasses.replace(web_settings, model="cosyvoice2-int8")


def test_switching_while_the_old_model_is_still_being_released_is_refused(studio):
    closing, release = threading.Event(), threading.Event()
    job = studio.submit(TTSRequest(text="Load it."))
    assert job.wait(10)
    engine = studio.engines[0]

    def slow_close():
        closing.set()
        assert release.wait(10)

    engine.close = slow_close
    unloading = threading.Thread(target=studio.holder.unload)  # the idle unload, at the wrong moment
    unloading.start()
    assert closing.wait(10)
    with pytest.raises(ConflictError) as refused:
        studio.switch_model("cosyvoice2-int8")
    assert refused.value.code == "model_switch_loading" and "releasing memory" in refused.value.message
    assert studio.settings.model == "kokoro-int8"
    release.set()
    unloading.join(10)
    assert studio.switch_model("cosyvoice2-int8").id == "cosyvoice2-int8"
