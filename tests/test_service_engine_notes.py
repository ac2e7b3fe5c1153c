"""An engine's notes on its chunks (``AudioChunk.notes``) reach a streamed answer and the page."""

from __future__ import annotations

import dataclasses

from cosyedge.notes import Note, code_of
from cosyedge.service.requests import TTSRequest
from cosyedge.web.report_panel import describe
from tests.helpers.fake_engine import FakeEngine


def test_a_streamed_answer_carries_the_notes_of_its_chunks(make_service, monkeypatch):
    synthesize = FakeEngine.synthesize

    def noting(self, *args, **kwargs):  # noqa: ANN001, ANN202 - the fake's own signature
        for chunk in synthesize(self, *args, **kwargs):
            note = Note(f"sentence {chunk.index + 1} finished whole", code="stream_cache_limit",
                        sentence=chunk.index + 1, budget_mb=64.0)
            yield dataclasses.replace(chunk, notes=(note,) if chunk.index == 1 else ())

    monkeypatch.setattr(FakeEngine, "synthesize", noting)
    job = make_service().submit(TTSRequest(text="One sentence. Another one. A third."), stream=True)
    assert job.wait(10)
    result = job.outcome()
    limited = [note for note in result.notes if code_of(note) == "stream_cache_limit"]
    assert [dict(note.params) for note in limited] == [{"sentence": 2, "budget_mb": 64.0}]
    assert "**Streaming / 流式**: sentence 2 finished whole" in describe(result)
