"""REST and prompt transcripts (fake engine and recognizer, live server on 127.0.0.1): /tts returns
the transcript and the clone mode used; /transcribe hears a prompt as a queued job."""

from __future__ import annotations

import httpx

from cosyedge.voices.transcripts import ZERO_SHOT_CONFIDENCE
from tests.helpers.fake_engine import FakeFactory
from tests.helpers.fake_recognizer import FakeRecognizer
from tests.web.test_api import wav_b64


def test_tts_without_transcript_returns_what_was_heard_and_the_mode(make_service, live_server):
    recognizer = FakeRecognizer(text="Good morning, class.", confidence=ZERO_SHOT_CONFIDENCE + 0.1)
    server = live_server(make_service(factory=FakeFactory(native_clone=True), recognizer=recognizer))
    body = {"text": "Hello.", "consent": True, "prompt_audio": wav_b64(4.0), "language": "en"}
    reply = httpx.post(f"{server.url}/tts", json=body, timeout=30).json()
    assert reply["clone_mode"] == "zero_shot"
    assert reply["transcript"]["text"] == "Good morning, class." and reply["transcript"]["source"] == "asr"
    assert any(note.startswith("prompt transcript heard offline") for note in reply["notes"])
    typed = httpx.post(f"{server.url}/tts", json={**body, "prompt_text": "Hi."}, timeout=30).json()
    assert typed["clone_mode"] == "zero_shot" and typed["transcript"]["source"] == "user"
    recognizer.confidence = ZERO_SHOT_CONFIDENCE - 0.3
    other = httpx.post(f"{server.url}/tts", json={**body, "prompt_audio": wav_b64(5.0)}, timeout=30).json()
    assert other["clone_mode"] == "cross_lingual" and other["transcript"]["trusted"] is False
    preset = httpx.post(f"{server.url}/tts", json={"text": "Hello."}, timeout=30).json()
    assert preset["clone_mode"] is None and preset["transcript"] is None


def test_transcribe_route_hears_a_prompt_and_refuses_without_consent(make_service, live_server):
    server = live_server(make_service(recognizer=FakeRecognizer(text="你好，同学们。", confidence=0.88,
                                                                language="zh")))
    r = httpx.post(f"{server.url}/transcribe", json={"prompt_audio": wav_b64(4.0), "consent": True,
                                                     "language": "zh"}, timeout=30)
    assert r.status_code == 200, r.text
    heard = r.json()
    assert (heard["text"], heard["source"], heard["confidence"], heard["trusted"]) == ("你好，同学们。", "asr", 0.88, True)
    refused = httpx.post(f"{server.url}/transcribe", json={"prompt_audio": wav_b64(4.0)}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "consent_required"
    bad = httpx.post(f"{server.url}/transcribe", json={"prompt_audio": "bm90IGF1ZGlv", "consent": True}, timeout=30)
    assert bad.status_code == 400
