"""The speed-mode check as the service's low-priority work, on the fake engine with quality modes:
its record written atomically and shown by /models' data, yielding to users' jobs, cancel (the
previous record stays), the model switch, the automatic start on an idle box, and staleness."""

from __future__ import annotations

import dataclasses
import json
import threading

import numpy as np
import pytest

from cosyedge.catalog.manifest import read_manifest, write_manifest
from cosyedge.catalog.mode_verdicts import RESULT_NAME, read_record
from cosyedge.errors import ConflictError, InputError
from cosyedge.service import mode_check_runner
from cosyedge.service.requests import TTSRequest
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.model_folders import COSYVOICE_LICENCE
from tests.helpers.waiting import wait_until

MODES = ("exact", "balanced", "live")
MODEL = "cosyvoice2-check"


def make_cosyvoice_folder(models_dir, name: str = MODEL, presets: bool = True, converter: str = "cosyedge 0.1.0"):
    """A folder whose manifest says CosyVoice2 (a model with speed modes); no runnable files."""
    folder = models_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llm.onnx").write_bytes(b"\x01" * 64)
    config = {"frontend": {"presets": "spk2info.npz"} if presets else {}}
    write_manifest(folder, "cosyvoice2", ["llm.onnx"], licence=COSYVOICE_LICENCE, converter=converter, config=config)
    return folder


class CheckEngine(FakeEngine):
    """Sine tones with quality modes; ``hold`` keeps every render of the check (seeded) waiting;
    ``renders`` counts the check's renders, ``user_renders`` the users'."""

    name = "cosyvoice2"
    model_id = MODEL

    def __init__(self, presets: bool = True, hold: threading.Event | None = None) -> None:
        super().__init__(quality_modes=MODES)
        self.hold = hold or threading.Event()
        if hold is None:
            self.hold.set()
        self.check_started = threading.Event()
        self.renders = 0
        self.user_renders = 0
        self._presets = presets

    def presets(self):
        return super().presets() if self._presets else []

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        if options.seed is None:  # a user's job (the check seeds every line)
            self.user_renders += 1
            yield from super().synthesize(text, voice, options, progress, cancelled)
            return
        self.check_started.set()
        assert self.hold.wait(10), "the test never let the check's render go"
        self.renders += 1
        yield from super().synthesize(text, voice, options, progress, cancelled)


@pytest.fixture
def checking(make_service, web_settings):
    """A service serving a CosyVoice2-looking folder on CheckEngine (automatic checks off)."""
    make_cosyvoice_folder(web_settings.models_path)
    settings = dataclasses.replace(web_settings, model=MODEL, auto_mode_check=False)
    engines: list[CheckEngine] = []
    hold = threading.Event()
    hold.set()

    def factory():
        engines.append(CheckEngine(hold=hold))
        return engines[-1]

    service = make_service(settings=settings, factory=factory)
    service.engines, service.hold = engines, hold
    service.mode_checks.per_language = 1  # the flow is the same with one line per language
    return service


def finish(service, model=MODEL):
    assert service.mode_checks.wait(30), "the check did not end"
    return service.mode_check(model)


def test_a_check_renders_every_mode_and_writes_its_record(checking, web_settings):
    checking.mode_checks.per_language = None
    status = checking.check_modes(MODEL)
    assert status["state"] == "running"
    answer = finish(checking)
    assert answer["status"]["state"] == "done", answer["status"]
    result = answer["result"]
    assert answer["current"] is True and result["voice"] == {"kind": "preset", "id": "female_1", "name": "female_1"}
    assert set(result["modes"]) == {"balanced", "live"} and result["judge"] == "d-vector"
    assert result["languages"] == ["en", "ja", "zh"] and result["lines"] == 18
    engine = checking.engines[0]
    assert engine.renders == 3 * 18
    seeds = {}
    for text, _voice, options in engine.calls:
        seeds.setdefault(text, set()).add(options.seed)
    assert all(len(s) == 1 for s in seeds.values()), "every mode renders a line with the same seed"
    live = result["modes"]["live"]
    assert live["figures"]["similarity"] == pytest.approx(1.0) and live["figures"]["intelligibility_delta"] == 0
    # the stand-in recognizer hears one fixed sentence: exact is not heard, so no mode is vouched for
    assert live["verdict"] == {"recommended": False, "failed": ["exact_not_heard"]}
    listed = {m["id"]: m for m in checking.models()["models"]}[MODEL]["speed_modes"]
    assert set(listed["modes"]) == {"balanced", "live"} and not listed["stale"]
    folder = web_settings.models_path / MODEL
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
    assert RESULT_NAME not in read_manifest(folder, "")["files"]


def test_a_cancelled_check_leaves_the_previous_record_whole(checking, web_settings):
    checking.check_modes(MODEL)
    before = finish(checking)["result"]
    path = web_settings.models_path / MODEL / RESULT_NAME
    written = path.read_bytes()
    engine = checking.engines[0]
    checking.hold.clear()
    engine.check_started.clear()
    checking.check_modes(MODEL)
    assert engine.check_started.wait(10)
    assert checking.cancel_mode_check(MODEL)
    checking.hold.set()
    answer = finish(checking)
    assert answer["status"]["state"] == "cancelled"
    assert path.read_bytes() == written and answer["result"] == before


def test_the_check_yields_to_a_users_job_and_goes_on_after(checking):
    checking.hold.clear()
    checking.check_modes(MODEL)
    wait_until(lambda: checking.engines and checking.engines[0].check_started.is_set(), 10, "a check render held")
    engine = checking.engines[0]
    # A user's job while the check renders: it runs at once, next to at most that one render.
    job = checking.submit(TTSRequest(text="Hello there.", speaker="female_1"))
    assert job.wait(10) and job.state.value == "done", "the user's job waited for the check"
    # A user's job that runs long: the check renders nothing new while it runs.
    gate = threading.Event()
    original = engine.synthesize

    def slow_user(text, voice, options, progress=None, cancelled=None):
        if options.seed is None:
            assert gate.wait(10)
        yield from original(text, voice, options, progress, cancelled)

    engine.synthesize = slow_user
    long_job = checking.submit(TTSRequest(text="A long one.", speaker="female_1"))
    checking.hold.set()
    wait_until(checking.mode_checks.yielding.is_set, 10, "the check yielding")
    renders = engine.renders
    assert checking.mode_checks.yielding.wait(0.3) and engine.renders == renders
    gate.set()
    assert long_job.wait(10)
    assert finish(checking)["status"]["state"] == "done"
    assert engine.renders >= 9  # a render a user's job interrupted was done again


def test_a_model_switch_cancels_the_check(checking, web_settings):
    make_cosyvoice_folder(web_settings.models_path, "other-model")
    checking.check_modes(MODEL)
    wait_until(lambda: checking.engines and checking.engines[0].check_started.is_set(), 10, "the check's render")
    checking.switch_model("other-model")
    assert checking.mode_check(MODEL)["status"]["state"] == "cancelled"
    assert not (web_settings.models_path / MODEL / RESULT_NAME).exists()


def test_refusals_name_their_codes(checking, web_settings, make_service):
    with pytest.raises(ConflictError) as not_served:
        make_cosyvoice_folder(web_settings.models_path, "other-model")
        checking.check_modes("other-model")
    assert not_served.value.code == "mode_check_not_served"
    make_cosyvoice_folder(web_settings.models_path, "no-presets", presets=False)
    bare = make_service(settings=dataclasses.replace(web_settings, model="no-presets", auto_mode_check=False),
                        factory=lambda: CheckEngine(presets=False))
    with pytest.raises(InputError) as needs_voice:
        bare.check_modes("no-presets")
    assert needs_voice.value.code == "mode_check_needs_voice"
    checking.engines  # the served model has modes; a Kokoro folder would not
    from tests.helpers.model_folders import make_model

    make_model(web_settings.models_path, "kokoro-int8")
    kokoro = make_service(settings=dataclasses.replace(web_settings, model="kokoro-int8", auto_mode_check=False))
    with pytest.raises(InputError) as no_modes:
        kokoro.check_modes("kokoro-int8")
    assert no_modes.value.code == "mode_check_no_modes"


def test_a_reconverted_model_makes_the_record_stale_and_an_update_of_the_app_does_not(checking, web_settings):
    checking.check_modes(MODEL)
    assert finish(checking)["current"] is True
    folder = web_settings.models_path / MODEL
    manifest = read_manifest(folder, "")
    record = json.loads((folder / RESULT_NAME).read_text())
    record["versions"]["cosyedge"] = "9.9.9"  # what an OTA update changes: not the model's identity
    (folder / RESULT_NAME).write_text(json.dumps(record))
    assert read_record(folder).current
    (folder / "llm.onnx").write_bytes(b"\x02" * 64)  # reconverted: another file
    write_manifest(folder, "cosyvoice2", ["llm.onnx"], converter=manifest["converter"], config=manifest["config"])
    assert not read_record(folder).current
    listed = {m["id"]: m for m in checking.models()["models"]}[MODEL]["speed_modes"]
    assert listed["stale"]
    write_manifest(folder, "cosyvoice2", ["llm.onnx"], converter="cosyedge 0.2.0", config=manifest["config"])
    assert not read_record(folder).current


def test_the_check_starts_by_itself_on_an_idle_box_once(checking, monkeypatch):
    monkeypatch.setattr(mode_check_runner, "AUTO_IDLE_S", 0.0)
    checking.settings = dataclasses.replace(checking.settings, auto_mode_check=True)
    runner = checking.mode_checks
    assert runner.start_if_due()
    assert finish(checking)["status"]["automatic"] is True
    assert not runner.due(), "a current record needs no check"
    checking.settings = dataclasses.replace(checking.settings, auto_mode_check=False)
    (checking.settings.model_path / RESULT_NAME).unlink()
    assert not runner.due(), "the setting turns it off"


def test_an_automatic_check_waits_for_an_idle_queue(checking, monkeypatch):
    monkeypatch.setattr(mode_check_runner, "AUTO_IDLE_S", 3600.0)
    checking.settings = dataclasses.replace(checking.settings, auto_mode_check=True)
    assert not checking.mode_checks.due()


def test_a_saved_voice_is_named_in_the_record(checking):
    rate = 24000
    t = np.arange(rate * 4) / rate
    audio = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, rate, format="WAV")
    info = checking.save_voice("Ms Li", buf.getvalue(), "hello there", consent=True)
    checking.check_modes(MODEL, voice_id=info.id)
    result = finish(checking)["result"]
    assert result["voice"] == {"kind": "saved", "id": info.id, "name": "Ms Li"}


def test_the_record_is_no_model_file_to_the_self_test_or_the_catalog(checking, web_settings):
    from cosyedge.catalog.models import ModelCatalog
    from cosyedge.ops.selftest import check_manifest

    checking.check_modes(MODEL)
    finish(checking)
    folder = web_settings.models_path / MODEL
    assert (folder / RESULT_NAME).is_file()
    assert check_manifest(folder).ok, check_manifest(folder)
    assert ModelCatalog(web_settings.models_path).get(MODEL).id == MODEL
    (folder / RESULT_NAME).write_text("{damaged")
    assert read_record(folder) is None and check_manifest(folder).ok
