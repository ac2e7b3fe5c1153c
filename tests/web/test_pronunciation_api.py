"""REST: the pronunciation dictionary's routes, captions on /tts, none on the OpenAI route."""

from __future__ import annotations

import httpx

from cosyedge.lexicon.readings import MAX_WORD_CHARS


def test_entries_are_added_listed_deleted_imported_and_exported(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        added = client.post("/pronunciations", json={"language": "zh", "word": "银行", "reading": "yin2 hang2"})
        assert added.status_code == 200 and added.json() == {
            "entry": {"language": "zh", "word": "银行", "reading": "yin2 hang2"}, "replaced": False}
        tsv = "zh\t重庆\tchong2 qing4\nen\tNice\t/niːs/\nzh\t生肖\tsheng1\nbroken\n".encode()
        report = client.post("/pronunciations/import", content=tsv).json()
        assert (report["added"], report["replaced"]) == (2, 0)
        assert [(p["line"], p["code"]) for p in report["problems"]] == [(3, "reading_syllable_count"),
                                                                      (4, "reading_tsv_columns")]
        listing = client.get("/pronunciations").json()
        assert [e["word"] for e in listing["entries"]] == ["Nice", "重庆", "银行"] and listing["problems"] == []
        assert client.delete("/pronunciations/en/nice").json()["deleted"]["word"] == "Nice"
        gone = client.delete("/pronunciations/en/Nice")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "reading_entry_unknown"
        export = client.get("/pronunciations/export")
        assert export.headers["content-type"].startswith("text/tab-separated-values")
        assert export.text.endswith("zh\t重庆\tchong2 qing4\nzh\t银行\tyin2 hang2\n")


def test_bad_entries_are_400_with_a_code_naming_the_word(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body, code in [({"language": "zh", "word": "银行", "reading": "yin2 xang2"}, "reading_pinyin_unknown"),
                           ({"language": "zh", "word": "银行", "reading": "yin2 hang7"}, "reading_tone_out_of_range"),
                           ({"language": "en", "word": "Nice", "reading": "/niːsq/"}, "reading_ipa_unknown"),
                           ({"language": "zh", "word": " ", "reading": "a1"}, "reading_word_empty"),
                           ({"language": "zh", "word": "行" * (MAX_WORD_CHARS + 1), "reading": "a1"},
                            "reading_word_too_long"),
                           ({"language": "en", "word": "Nice", "reading": "niːs!"}, "reading_punctuation"),
                           ({"language": "zh", "word": "银\u200b行", "reading": "yin2 hang2"}, "reading_control_chars")]:
            answer = client.post("/pronunciations", json=body)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["code"] == code and (body["word"].strip() == "" or body["word"][:1] in error["message"])
        assert client.post("/pronunciations/import", content=b"zh\t\xff\tx\n").json()["error"]["code"] == \
            "reading_tsv_not_utf8"
        assert client.get("/pronunciations").json()["entries"] == []


def test_tts_answers_captions_on_request_and_the_openai_route_never(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        plain = client.post("/tts", json={"text": "Hello there. Bye."}).json()
        assert plain["captions"] is None and plain["cues"] is None
        vtt = client.post("/tts", json={"text": "Hello there. Bye.", "captions": "vtt"}).json()
        assert vtt["caption_format"] == "vtt" and vtt["captions"].startswith("WEBVTT")
        assert [c["text"] for c in vtt["cues"]] == ["Hello there.", "Bye."]
        assert vtt["cues"][-1]["end"] <= vtt["duration"] + 1e-3 and vtt["cues"][0]["start"] == 0.0
        srt = client.post("/tts", json={"text": "Hello there. Bye.", "captions": "srt"}).json()
        assert srt["captions"].startswith("1\n00:00:00,000 --> ")
        bad = client.post("/tts", json={"text": "Hi.", "captions": "ass"})
        assert bad.status_code == 400
        speech = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello there.", "voice": "alloy",
                                                       "response_format": "wav", "captions": "vtt"})
        assert speech.status_code == 200 and speech.headers["content-type"] == "audio/wav"
        assert not any("caption" in name.lower() for name in speech.headers)


def test_a_bad_inline_reading_is_refused_before_the_queue(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/tts", json={"text": "去{银行|yin2 hang9}"})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "reading_tone_out_of_range"
        assert "银行" in answer.json()["error"]["message"]
