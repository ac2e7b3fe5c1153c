"""The Wyoming server against the bad-input corpus's raw events (scripts/make_bad_corpus.py
``wyoming_cases``), sent over a plain socket as a hostile local client would: each gets an ``error``
event with its code, one log line and no traceback; the connection goes on when the framing held
and is closed after the error when it broke."""

from __future__ import annotations

import importlib
import json
import logging
import socket

import pytest
from wyoming.event import read_event

from cosyedge.web.wyoming_server import WyomingServer, WyomingSettings
from tests.helpers.live_server import free_port

corpus = importlib.import_module("scripts.make_bad_corpus")
CASES = corpus.wyoming_cases()
PING = b'{"type": "ping", "data": {"text": "still there?"}}\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One Wyoming server over a fake-engine service for every case (each opens its own connection)."""
    from cosyedge import config
    from cosyedge.service.facade import Service
    from tests.helpers.fake_engine import FakeEngine

    root = tmp_path_factory.mktemp("wyoming-bad")
    (root / "outputs").mkdir()
    settings = config.Settings(root=root, idle_unload_minutes=0).validate()
    service = Service(settings, engine_factory=lambda: FakeEngine())
    service.start()
    wyoming = WyomingServer(service, WyomingSettings(port=free_port())).start()
    yield wyoming
    wyoming.stop()
    service.close()


def exchange(server: WyomingServer, data: bytes, half_close: bool = False, until: str | None = None) -> list:
    """Send ``data`` on a fresh connection; the events read until one of type ``until`` (then
    "open" is appended: the connection still answered) or until the server closes (then "closed")."""
    with socket.create_connection(("127.0.0.1", server.settings.port), timeout=10) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        stream = sock.makefile("rb")
        events: list = []
        while (event := read_event(stream)) is not None:
            events.append(event)
            if event.type == until:
                return events + ["open"]
        return events + ["closed"]


def test_the_corpus_has_the_issues_cases():
    ids = {c.id for c in CASES}
    for needed in ("header_not_json", "text_is_number", "data_length_negative", "data_length_not_a_number",
                   "header_invalid_utf8", "data_invalid_utf8", "unknown_event", "chunk_without_start",
                   "stop_without_start"):
        assert f"wyoming-{needed}" in ids
    assert len(ids) == len(CASES) and len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_event_gets_an_error_with_its_code_and_one_log_line(server, case, caplog):
    caplog.set_level(logging.INFO)
    events = exchange(server, case.data + (b"" if case.half_close else PING), case.half_close, until="pong")
    errors = [e for e in events[:-1] if e.type == "error"]
    assert len(errors) == 1, events
    assert errors[0].data["code"] == case.code and errors[0].data["text"].strip()
    if case.closes:  # the ping after the broken event is never read
        assert events[-1] == "closed", "the connection stayed open after its framing broke"
    else:  # the ping after the bad event is answered, after the error: the connection goes on
        assert [e.type for e in events[:-1]][-2:] == ["error", "pong"], events
    wyoming_lines = [r for r in caplog.records if r.name.startswith("cosyedge.web.wyoming")
                     and "bad event" in r.getMessage()]
    assert len(wyoming_lines) == 1 and case.code in wyoming_lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records), "a bad event logged a traceback"
    assert not any("exception" in r.getMessage().lower() for r in caplog.records if r.name == "asyncio")


def test_a_good_event_after_an_intact_bad_one_is_still_spoken(server):
    synthesize = json.dumps({"type": "synthesize", "data": {"text": "Hello there."}}).encode() + b"\n"
    events = exchange(server, b'{"type": "synthesize-stop"}\n' + synthesize, until="audio-stop")
    kinds = [e.type for e in events[:-1]]
    assert kinds[0] == "error" and kinds[1] == "audio-start" and kinds[-1] == "audio-stop", kinds


def test_the_answers_keep_the_order_of_the_questions(server):
    """An error for a bad event sent after a synthesize comes after that synthesize's audio, never
    in the middle of its chunks."""
    synthesize = json.dumps({"type": "synthesize", "data": {"text": "One. Two. Three."}}).encode() + b"\n"
    events = exchange(server, synthesize + b'{"type": "transcribe"}\n', until="error")
    kinds = [e.type for e in events[:-1]]
    assert kinds[-1] == "error" and kinds[-2] == "audio-stop", kinds
