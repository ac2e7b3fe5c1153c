"""REST lessons: POST /lessons queues a lesson file, GET /lessons/{id}/audio|zip fetch the result."""

from __future__ import annotations

import io
import zipfile

import httpx
import soundfile as sf

from tests.helpers.waiting import wait_until

LESSON = "# Week 1\n\nRivers run to the sea. They carry water.\n\nThe sea is salty!".encode()


def test_a_lesson_is_queued_and_its_wav_and_zip_fetched(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/lessons", params={"filename": "week1.md", "speaker": "male_1",
                                                 "per_paragraph": "true"}, content=LESSON)
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert (body["paragraphs"], body["status"]) == (3, f"/jobs/{body['job_id']}")
        job = server.service.job(body["job_id"])
        wait_until(lambda: job.finished, timeout=20)
        audio = client.get(body["audio"])
        assert audio.status_code == 200 and audio.headers["content-type"] == "audio/wav"
        samples, rate = sf.read(io.BytesIO(audio.content))
        assert rate == 24000 and len(samples) > rate
        with zipfile.ZipFile(io.BytesIO(client.get(body["zip"]).content)) as archive:
            assert sorted(n.rsplit(".", 1)[1] for n in archive.namelist()) == ["srt"] * 3 + ["vtt"] * 3 + ["wav"] * 3
        vtt = client.get(body["captions"])
        assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
        assert vtt.text.startswith("WEBVTT") and "They carry water." in vtt.text
        srt = client.get(f"/lessons/{body['job_id']}/captions", params={"format": "srt"})
        assert srt.text.count(" --> ") == vtt.text.count(" --> ") == 4  # one cue per sentence (the heading too)
        bad = client.get(f"/lessons/{body['job_id']}/captions", params={"format": "ass"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "captions_format_unknown"


def test_a_running_lesson_answers_202_with_its_progress(server, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.2
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = client.post("/lessons", content=b"One. Two.\n\nThree. Four.\n\nFive.").json()
        running = client.get(body["audio"])
        assert running.status_code == 202 and running.json()["state"] in ("waiting", "running")
        assert body["zip"] is None
        zip_url = f"/lessons/{body['job_id']}/zip"
        assert client.get(zip_url).status_code == 202
        wait_until(lambda: server.service.job(body["job_id"]).finished, timeout=20)
        missing = client.get(zip_url)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "lesson_unknown"


def test_bad_lessons_get_the_pages_codes(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        cases = [({"filename": "l.txt"}, "Grüße".encode("latin-1"), 400, "lesson_not_utf8"),
                 ({"filename": "l.pdf"}, b"hello", 400, "lesson_file_type"),
                 ({}, b"   ", 400, "lesson_empty"),
                 ({}, b"x" * (240_004 + 1), 413, "lesson_file_too_large")]
        for params, content, status, code in cases:
            answer = client.post("/lessons", params=params, content=content)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
        assert client.get("/lessons/nope/audio").json()["error"]["code"] == "job_unknown"
    assert server.service.active_jobs() == []
