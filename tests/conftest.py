"""Shared fixtures. Keep each small and documented; add yours in its own section.

Real-model fixtures assemble models/kokoro-int8 once per session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from cosyedge.config import Settings

from tests.helpers import REPO
from tests.helpers.live_server import LiveServer


#: Fixtures built by scripts/test.sh's step 0 (in .venv-ref): a test that uses one is slow, so the quick
#: loop (`scripts/test.sh --fast`, which skips step 0) never needs them.
NEEDS_TINY_MODELS = frozenset({"tiny_cosyvoice_models", "tiny_cosyvoice3_models"})


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """Mark every test that uses a tiny converted CosyVoice model ``slow`` (see NEEDS_TINY_MODELS)."""
    for item in items:
        if NEEDS_TINY_MODELS & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def kokoro_models_dir(tmp_path_factory) -> Path:
    """A models/ directory holding the real embedded model (assembled from the PyPI packages)."""
    from cosyedge.engines.kokoro import model_files
    from cosyedge.export.kokoro import assembly

    repo_models = REPO / "models"
    if (repo_models / model_files.MODEL_ID / "manifest.json").is_file():
        return repo_models
    models = tmp_path_factory.mktemp("models")
    assembly.assemble(models)
    return models


@pytest.fixture(scope="session")
def kokoro_engine(kokoro_models_dir):
    """The real Kokoro engine, loaded once (2 threads)."""
    from cosyedge import config
    from cosyedge.engines.loader import load_engine

    return load_engine(config.from_env({}, models_dir=kokoro_models_dir, onnx_threads=2))


# --- the speed-mode check's automatic start -------------------------------------------


@pytest.fixture(autouse=True)
def no_automatic_mode_check(monkeypatch):
    """No service of a test starts the speed-mode check by itself: it would render in the background
    of other tests and write modes.json into the shared tiny models. Apps started as processes get
    ``COSYEDGE_AUTO_MODE_CHECK=0``; the tests of the automatic start call ``start_if_due`` directly."""
    from cosyedge.service.mode_check_runner import ModeCheckRunner

    monkeypatch.setattr(ModeCheckRunner, "watch", lambda self, interval=10.0: None)


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook
    """Apps the tests start as processes (module-scoped fixtures too) never check by themselves."""
    os.environ.setdefault("COSYEDGE_AUTO_MODE_CHECK", "0")


# --- web / service ------------------------------------------------------------------


@pytest.fixture
def web_settings(tmp_path: Path) -> Settings:
    """Settings rooted in a temp dir (outputs/ there), loopback, fast idle unload off."""
    (tmp_path / "outputs").mkdir()
    return Settings(root=tmp_path, idle_unload_minutes=0).validate()


@pytest.fixture
def fake_factory():
    """A FakeFactory (tests/helpers/fake_engine.py) producing sine-tone engines; tweak before first use."""
    from tests.helpers.fake_engine import FakeFactory

    return FakeFactory()


@pytest.fixture
def make_service(web_settings: Settings, fake_factory) -> Iterator[Callable[..., object]]:
    """Build Services on the fake engine; every one is closed at teardown."""
    from cosyedge.service.facade import Service

    built: list[Service] = []

    from tests.helpers.fake_recognizer import FakeRecognizer

    def make(settings: Settings | None = None, factory=None, **kwargs) -> Service:
        kwargs.setdefault("recognizer", FakeRecognizer())  # no real Whisper behind the fake engine
        service = Service(settings or web_settings, engine_factory=factory or fake_factory, **kwargs)
        service.start()
        built.append(service)
        return service

    yield make
    for service in built:
        service.close()


@pytest.fixture
def live_server() -> Iterator[Callable[..., LiveServer]]:
    """Start ``build_app(service)`` (app.py) on a real socket; stopped at teardown."""
    from app import build_app

    servers: list[LiveServer] = []

    def start(service, with_ui: bool = False) -> LiveServer:
        server = LiveServer(build_app(service, with_ui=with_ui)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def server(make_service, live_server):
    """A live REST/UI server over a service with the fake engine; ``server.service`` is that service."""
    service = make_service()
    srv = live_server(service)
    srv.service = service
    return srv


# --- tiny CosyVoice model (built in .venv-ref, used in .venv) -------------------------------------


@pytest.fixture(scope="session")
def tiny_cosyvoice_models() -> Path:
    """``models/`` holding the tiny converted CosyVoice2 model ``cosyvoice2-tiny`` (random weights).

    Built once per run in .venv-ref by scripts/test.sh and cached under test-artifacts/tiny-models
    (tests/helpers/tiny_models.py); shared by every test, so treat it as read-only. Fails, naming
    the command that builds it, when it is missing or older than its sources: it never skips.
    """
    from tests.helpers import tiny_models

    try:
        return tiny_models.require()
    except tiny_models.TinyModelsMissing as exc:
        reason = str(exc)
    pytest.fail(reason, pytrace=False)


@pytest.fixture
def tiny_cosyvoice_server(tiny_cosyvoice_models, tmp_path, live_server):
    """A live REST server in this process over a real service on the tiny CosyVoice2 model."""
    from cosyedge.config import Settings
    from cosyedge.service.facade import Service
    from tests.helpers.tiny_models import MODEL_ID

    # No thread calibration: it would run the flow itself (spies count its calls) and write into
    # the shared model folder.
    settings = Settings(root=tmp_path, models_dir=tiny_cosyvoice_models, model=MODEL_ID, onnx_threads=1,
                        idle_unload_minutes=0, thread_calibration=False).validate()
    service = Service(settings)
    service.start()
    yield live_server(service)
    service.close()


@pytest.fixture(scope="session")
def tiny_cosyvoice3_models() -> Path:
    """``models/`` holding the committed CosyVoice3 fixture converted int8 and fp32
    (tests/helpers/cosyvoice3_fixture.py; ``MODEL_IDS``), built by scripts/test.sh in .venv-ref;
    read-only. Fails, naming the build command, when it is missing or stale."""
    from tests.helpers import cosyvoice3_fixture

    try:
        return cosyvoice3_fixture.models_dir()
    except RuntimeError as exc:
        reason = str(exc)
    pytest.fail(reason, pytrace=False)


# --- the two environments ----------------------------------------------------------------------


def _is_reference_module(path: Path) -> bool:
    """Whether a test module declares ``pytest.mark.reference`` in its module-level ``pytestmark``."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr == "reference" for n in ast.walk(node.value))
    return False


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """Keep ``-m reference`` and ``-m "not reference"`` from importing the other environment's modules.

    Tests marked ``reference`` need the PyTorch reference stack (.venv-ref); the others need the
    app's stack (.venv: gradio, no torch). Importing a module of the other kind fails at collection,
    before any marker deselects it, so a module-level mark decides here instead.
    """
    expression = (config.getoption("markexpr") or "").strip()
    if "reference" not in expression or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    wants_reference = expression == "reference" or expression.startswith("reference and ")
    wants_others = "not reference" in expression
    if not (wants_reference or wants_others):
        return None
    is_reference = _is_reference_module(collection_path)
    return (wants_reference and not is_reference) or (wants_others and is_reference)
