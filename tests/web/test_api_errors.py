"""The REST error handlers decide by status and by the request, never by Starlette's or FastAPI's
wording: the tests reword those libraries' messages and expect the same answers."""

from __future__ import annotations

import fastapi.routing
import pytest
import starlette.routing
from fastapi import HTTPException
from fastapi.testclient import TestClient

from cosyedge.web.api import create_api


def reworded(detail: str) -> type[HTTPException]:
    """An HTTPException class whose every instance says ``detail`` instead."""
    class Reworded(HTTPException):
        def __init__(self, status_code: int, *args, **kwargs) -> None:
            kwargs.pop("detail", None)
            super().__init__(status_code, detail, headers=kwargs.get("headers"))

    return Reworded


@pytest.fixture
def api(make_service) -> TestClient:
    """The REST app alone (no page at "/"): the router's own 404 reaches the handlers."""
    return TestClient(create_api(make_service()))


def test_an_unknown_path_is_named_whatever_the_router_says(api, monkeypatch):
    monkeypatch.setattr(starlette.routing, "HTTPException", reworded("Nothing here"))
    r = api.post("/nowhere", json={})
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert error["code"] == "not_found" and error["message"].startswith("no route POST /nowhere;"), error


def test_a_body_that_is_not_utf8_is_named_whatever_fastapi_says(api, monkeypatch):
    monkeypatch.setattr(fastapi.routing, "HTTPException", reworded("Bad body"))
    r = api.post("/tts", content='{"text": "caf\u00e9"}'.encode("latin-1"),
                 headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "not UTF-8 text (byte 0xe9 at position 13)" in r.json()["error"]["message"], r.text


def test_a_broken_form_keeps_its_parsers_words(api):
    """A form's 400 comes from Starlette's parser, which names the problem: not a JSON-body hint."""
    r = api.post("/v1/audio/voices", content=b"--x\r\n\xe9broken",
                 headers={"content-type": "multipart/form-data"})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "boundary" in message and "UTF-8" not in message and "JSON" not in message, message
