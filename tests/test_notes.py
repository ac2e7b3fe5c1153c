"""cosyedge.notes: a Note is its English text with a code; every code is listed and used."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from cosyedge.notes import NOTE_CODES, Note, code_of
from tests.helpers.code_scan import code_problems, package_sources


def note_code_problems(sources: dict[str, str]) -> tuple[list[str], set[str]]:
    """(problems, codes used): a ``Note(..., code=...)`` whose code is not listed or no literal.
    ``cosyedge/notes.py`` itself is left out: the type rebuilds copies from a code it is given."""
    sources = {path: source for path, source in sources.items() if not path.endswith("cosyedge/notes.py")}
    return code_problems(sources, {"Note"}, lambda callee: NOTE_CODES,
                         lambda callee, code: f"note code {code!r} is not in NOTE_CODES")


def test_every_note_names_a_listed_code_and_every_code_is_used():
    problems, used = note_code_problems(package_sources())
    assert problems == []
    assert set(NOTE_CODES) - used == set(), "listed but never made"
    assert len(NOTE_CODES) == len(set(NOTE_CODES))


def test_the_note_check_fails_on_an_unlisted_code():
    problems, _ = note_code_problems({"bad.py": 'Note("x", code="no_such_note")\nNote("y", code=CODE)\n'})
    assert len(problems) == 2, problems


def test_a_note_is_its_text_for_every_client():
    note = Note("speaker 'male_1' ignored: the voice comes from prompt_audio",
                code="speaker_ignored_prompt_audio", speaker="male_1", voice_id=None)
    assert note == "speaker 'male_1' ignored: the voice comes from prompt_audio" and isinstance(note, str)
    assert json.dumps({"notes": [note]}) == json.dumps({"notes": [str(note)]})  # REST bodies unchanged
    assert f"{note}" == str(note) and "; ".join([note, note]).count("ignored") == 2
    assert code_of(note) == "speaker_ignored_prompt_audio" and code_of("plain text") is None
    with pytest.raises(TypeError):
        note.params["speaker"] = "x"  # type: ignore[index]


@pytest.mark.parametrize("clone", [copy.copy, copy.deepcopy, lambda n: pickle.loads(pickle.dumps(n))])
def test_copies_keep_the_code_and_params(clone):
    note = Note("trimmed 1.5 s of silence from the ends", code="prompt_silence_trimmed", seconds=1.5)
    again = clone(note)
    assert again == note and again.code == note.code and dict(again.params) == {"seconds": 1.5}
