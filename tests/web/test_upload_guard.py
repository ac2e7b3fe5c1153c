"""The page's upload route on a live server: a flood of uploads stays under the cache's cap, and a
nearly full disk refuses uploads and jobs with the code ``disk_low`` (the free-space probe is the
service's seam)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import httpx
import pytest

from cosyedge.ops.janitor import Janitor
from tests.helpers.live_server import LiveServer

MB = 1_000_000
UPLOAD = "/gradio_api/upload"


def cache_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def page(monkeypatch, tmp_path, web_settings, make_service):
    """Start the app with the page, its upload cache in tmp_path/gradio, and the janitor (not its
    thread: the upload route's own sweep is what is tested); returns a function of settings and
    probe giving (server url, cache folder)."""
    from app import build_app

    cache = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    servers: list[LiveServer] = []

    def start(probe=None, **changes):
        settings = dataclasses.replace(web_settings, **changes)
        service = make_service(settings, **({"disk_probe": probe} if probe else {}))
        janitor = Janitor.from_settings(settings, in_use=service.in_use_paths, uploads_dir=cache)
        server = LiveServer(build_app(service, with_ui=True, janitor=janitor)).start()
        servers.append(server)
        return server.url, cache

    yield start
    for server in servers:
        server.stop()


def test_a_flood_of_uploads_stays_under_the_cap_and_the_box_answers(page):
    url, cache = page(upload_cache_max_mb=1.0, min_free_disk_mb=0)
    cap = 1024 * 1024
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(40):  # 40 x 200 kB = 8 MB offered to a 1 MiB cache
            body = i.to_bytes(4, "big") + os.urandom(200_000)
            answer = client.post(UPLOAD, files={"files": (f"p{i}.wav", body, "audio/wav")})
            assert answer.status_code == 200, answer.text
            assert cache_bytes(cache) <= cap, f"cache over its cap after upload {i}"
        last = Path(answer.json()[0])
        assert last.is_file(), "the newest upload must survive the sweep"
        assert client.get("/health").status_code == 200
        spoken = client.post("/tts", json={"text": "Still here."})
        assert spoken.status_code == 200, spoken.text
    assert 0 < cache_bytes(cache) <= cap


def test_a_nearly_full_disk_refuses_uploads_and_jobs_with_a_code(page):
    free = {"bytes": 20 * MB}
    url, cache = page(probe=lambda folder: free["bytes"], min_free_disk_mb=100)
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post(UPLOAD, files={"files": ("p.wav", b"RIFF" + bytes(5000), "audio/wav")})
        assert answer.status_code == 507
        error = answer.json()["error"]
        assert (error["type"], error["code"]) == ("storage_full", "disk_low")
        assert "nearly full" in error["message"]
        assert cache_bytes(cache) == 0, "a refused upload must leave nothing in the cache"
        job = client.post("/tts", json={"text": "Hello."})
        assert job.status_code == 507 and job.json()["error"]["code"] == "disk_low"
        free["bytes"] = 500 * MB
        assert client.post(UPLOAD, files={"files": ("p.wav", b"RIFF" + bytes(5000), "audio/wav")}
                           ).status_code == 200
