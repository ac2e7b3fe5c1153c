"""Shared fixtures. Keep each small and documented; add yours in its own section.

Real-model fixtures assemble models/kokoro-int8 once per session.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from cosyedge.config import Settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def kokoro_models_dir(tmp_path_factory) -> Path:
    """A models/ directory holding the real embedded model (assembled from the PyPI packages)."""
    from cosyedge.engines.kokoro import model_files

    repo_models = REPO / "models"
    if (repo_models / model_files.MODEL_ID / "manifest.json").is_file():
        return repo_models
    models = tmp_path_factory.mktemp("models")
    model_files.assemble(models)
    return models


@pytest.fixture(scope="session")
def kokoro_engine(kokoro_models_dir):
    """The real Kokoro engine, loaded once (2 threads)."""
    from cosyedge import config
    from cosyedge.engines import load_engine

    return load_engine(config.from_env({}, models_dir=kokoro_models_dir, onnx_threads=2))


# --- web / service (issue 3) ------------------------------------------------------------------


@pytest.fixture
def web_settings(tmp_path: Path) -> Settings:
    """Settings rooted in a temp dir (outputs/ there), loopback, fast idle unload off."""
    (tmp_path / "outputs").mkdir()
    return Settings(root=tmp_path, idle_unload_minutes=0).validate()


@pytest.fixture
def fake_factory():
    """A FakeFactory (tests/fake_engine.py) producing sine-tone engines; tweak before first use."""
    from tests.fake_engine import FakeFactory

    return FakeFactory()


@pytest.fixture
def make_service(web_settings: Settings, fake_factory) -> Iterator[Callable[..., object]]:
    """Build Services on the fake engine; every one is closed at teardown."""
    from cosyedge.service import Service

    built: list[Service] = []

    def make(settings: Settings | None = None, factory=None, **kwargs) -> Service:
        service = Service(settings or web_settings, engine_factory=factory or fake_factory, **kwargs)
        service.start()
        built.append(service)
        return service

    yield make
    for service in built:
        service.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """A uvicorn server running an ASGI app in a thread on 127.0.0.1:<free port>."""

    def __init__(self, app: object) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=2, ws="none")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="live-server", daemon=True)

    def start(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("live server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


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
