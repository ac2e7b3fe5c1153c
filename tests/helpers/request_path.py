"""Watching the one request path: what ``Service.prepare`` returned and what ``Service.resolve``
was given, for the tests that check the worker and the CLI run the same prepared request."""

from __future__ import annotations

from cosyedge.service.facade import Service


def record_request_path(monkeypatch) -> tuple[list, list]:
    """Wrap ``Service.prepare`` and ``Service.resolve`` (on the class, so every service and the
    CLI's own one are seen); returns (prepared requests, requests resolve received), filled as
    they happen."""
    prepared: list = []
    resolved: list = []
    prepare, resolve = Service.prepare, Service.resolve

    def recording_prepare(self, request):
        prepared.append(prepare(self, request))
        return prepared[-1]

    def recording_resolve(self, engine, request, *args):
        resolved.append(request)
        return resolve(self, engine, request, *args)

    monkeypatch.setattr(Service, "prepare", recording_prepare)
    monkeypatch.setattr(Service, "resolve", recording_resolve)
    return prepared, resolved
