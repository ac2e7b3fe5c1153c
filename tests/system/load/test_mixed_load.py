"""Mixed concurrent load (REST, OpenAI route, Gradio API) against one live server (fake slow engine).

CI-sized run of bench/load.py's driver: the queue's limit holds whatever the route, the overflow is
told "busy" with Retry-After, nothing else fails and the server is idle and healthy afterwards.
"""

from __future__ import annotations

import json

import pytest

from bench.load import retry_figures, run_load

pytestmark = [pytest.mark.load, pytest.mark.slow]


@pytest.fixture
def ui_server(make_service, live_server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.15  # ~0.3 s per job: slots fill up, waits stay short
    service = make_service()
    srv = live_server(service, with_ui=True)
    srv.service = service
    srv.factory = fake_factory
    return srv


def test_mixed_load_respects_the_limit_and_answers_busy_properly(ui_server, capsys):
    report = run_load(ui_server.url, clients=16, requests=96, max_seconds=90)
    summary = {**report.as_dict(), "retry_after": retry_figures(ui_server.service.queue.busy_answers())}
    with capsys.disabled():
        print("\nload figures:", json.dumps(summary, ensure_ascii=False))
    assert len(report.outcomes) == 96, "the run stopped early (time bound hit)"
    assert report.errors() == [], summary["errors"]
    engine = ui_server.factory.engine
    assert engine.peak == 2, f"{engine.peak} syntheses ran at once; the limit is 2"
    assert 1 <= report.health_max_running <= 2
    assert report.health_max_waiting <= 8
    busy = report.busy()
    assert busy, "16 clients on 2 slots + 8 waiting never saw a busy answer"
    for outcome in busy:
        if outcome.route == "gradio" and "Queue is full" in outcome.message:
            continue  # Gradio's own queue refused first: a busy toast without a retry hint
        assert outcome.retry_after is not None and int(outcome.retry_after) >= 1, outcome
        assert "busy" in outcome.message
    for route in ("tts", "speech", "gradio"):
        assert report.latency(route)["n"] >= 1, f"no successful {route} request"
    assert report.healthy_after
    assert ui_server.factory.loads == 1
    retry = summary["retry_after"]  # from the jobs ahead, not a mean times the queue (was 3.6x)
    assert retry["n"] == 0 or retry["median_ratio"] <= 3, retry
