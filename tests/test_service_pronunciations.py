"""The box's pronunciation dictionary through the service (cosyedge/service/pronunciations.py) on the
real embedded engine: a damaged dictionary file never stops synthesis; its good entries still apply,
the answer names the lines skipped, and the file is left byte for byte as the teacher saved it."""

from __future__ import annotations

import dataclasses

import pytest

from cosyedge.lexicon.book import FILE_NAME
from cosyedge.notes import code_of
from cosyedge.service.requests import TTSRequest

pytestmark = pytest.mark.slow

#: One good entry, a tone out of range and a line with no tabs (a file not in UTF-8 at all gives no
#: entries: tests/lexicon/test_book.py).
DAMAGED = "zh\t银行\tyin2 hang2\nzh\t重庆\tchong2 qing9\nnonsense\n".encode()


def test_a_damaged_dictionary_file_never_stops_synthesis(web_settings, kokoro_models_dir):
    from cosyedge.service.facade import Service

    settings = dataclasses.replace(web_settings, models_dir=kokoro_models_dir, onnx_threads=2)
    settings.prompts_path.mkdir(parents=True, exist_ok=True)
    path = settings.prompts_path / FILE_NAME
    path.write_bytes(DAMAGED)
    service = Service(settings)
    service.start()
    try:
        job = service.submit(TTSRequest(text="我去银行。", speaker="female_1"))
        assert job.wait(300)
        result = job.outcome()
    finally:
        service.close()
    assert result.duration > 0.3
    notes = {code_of(note): note for note in result.notes}
    assert [e["word"] for e in notes["reading_applied"].params["entries"]] == ["银行"], result.notes
    assert notes["reading_book_damaged"].params["lines"] == [2, 3], result.notes
    assert path.read_bytes() == DAMAGED  # reading it changed nothing the teacher saved
