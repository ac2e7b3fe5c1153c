"""A voice moved between boxes with its encodings (cosyedge/voices/exchange.py, voice_file.py): reused
only on the same model (id and weights digest), format and key rule, from plain validated arrays;
an older voice file (three members) still imports; a bad encoding is left out, never the voice."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

from cosyedge.errors import InputError
from cosyedge.voices import voice_file
from cosyedge.voices.exchange import export_voice, import_voice
from cosyedge.voices.library import PromptCache, VoiceLibrary
from tests.helpers.model_folders import make_model
from tests.test_voices import LIMIT, CountingEngine, prompt


@pytest.fixture
def boxes(tmp_path):
    """Two boxes (library, cache, models/) holding the same model ``fake-1``."""
    out = []
    for name in ("a", "b"):
        root = tmp_path / name
        make_model(root / "models", "fake-1", engine="fake")
        out.append((VoiceLibrary(root / "library"), PromptCache(root / "cache"), root / "models"))
    return out


def encoded_voice(library, cache, engine, name="Ms Lee", transcript="hello there"):
    """Save a voice and encode it as a job would (through the cache), recording the encoding."""
    info = library.save(name, prompt(), transcript, engine=engine.name, model_id=engine.model_id)
    saved, text, _ = library.load(info.id)
    encoded = cache.get_or_encode(engine, saved, text)
    library.record_encoding(info.id, engine.name, engine.model_id, "sounds-a")
    return info, encoded


def test_an_import_on_the_same_model_needs_no_encoding(boxes):
    (lib_a, cache_a, models_a), (lib_b, cache_b, models_b) = boxes
    engine = CountingEngine("fake-1")
    info, encoded = encoded_voice(lib_a, cache_a, engine)
    data = export_voice(lib_a, cache_a, info.id, models_a)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert "encodings.json" in zf.namelist() and "encodings/0/style.npy" in zf.namelist()
        entry = json.loads(zf.read("encodings.json"))["encodings"][0]
    assert (entry["model_id"], entry["transcript"], entry["sounds"]) == ("fake-1", "hello there", "sounds-a")
    done = import_voice(lib_b, cache_b, data, models_b, max_bytes=LIMIT)
    assert (done.info.id, done.reused, done.skipped) == ("ms-lee", ("fake/fake-1",), ())
    saved, text, here = lib_b.load("ms-lee")
    other = CountingEngine("fake-1")
    again = cache_b.get_or_encode(other, saved, text)
    assert other.encodes == 0  # read from the cache: the encoding travelled
    np.testing.assert_array_equal(again.arrays["style"], encoded.arrays["style"])
    assert here.encoded_for == ("fake/fake-1",) and dict(here.sounds) == {"fake/fake-1": "sounds-a"}


def test_another_conversion_under_the_same_id_encodes_again(boxes, tmp_path):
    (lib_a, cache_a, models_a), (lib_b, cache_b, models_b) = boxes
    info, _ = encoded_voice(lib_a, cache_a, CountingEngine("fake-1"))
    data = export_voice(lib_a, cache_a, info.id, models_a)
    make_model(models_b, "fake-1", engine="fake", files={"model.onnx": b"other weights"})  # same id, other digest
    done = import_voice(lib_b, cache_b, data, models_b, max_bytes=LIMIT)
    assert done.reused == () and "another conversion" in done.skipped[0][1]
    saved, text, _ = lib_b.load("ms-lee")
    engine = CountingEngine("fake-1")
    cache_b.get_or_encode(engine, saved, text)
    assert engine.encodes == 1
    elsewhere = VoiceLibrary(tmp_path / "c" / "library")
    gone = import_voice(elsewhere, PromptCache(tmp_path / "c" / "cache"), data, tmp_path / "c" / "models",
                        max_bytes=LIMIT)
    assert gone.skipped == (("fake/fake-1", "no model 'fake-1' on this box"),)


def test_an_older_voice_file_without_encodings_still_imports(boxes):
    (lib_a, cache_a, _), (lib_b, cache_b, models_b) = boxes
    info, _ = encoded_voice(lib_a, cache_a, CountingEngine("fake-1"))
    old = lib_a.export(info.id)  # what a box before encodings travelled wrote: three members
    with zipfile.ZipFile(io.BytesIO(old)) as zf:
        assert sorted(zf.namelist()) == ["meta.json", "transcript.txt", "voice.wav"]
    done = import_voice(lib_b, cache_b, old, models_b, max_bytes=LIMIT)
    assert (done.info.id, done.reused, done.skipped) == ("ms-lee", (), ())


def tampered(data: bytes, change) -> bytes:
    """``data`` with its members changed by ``change(members, entry)`` (entry: the first encoding)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        members = {m: zf.read(m) for m in zf.namelist()}
    document = json.loads(members["encodings.json"])
    change(members, document["encodings"][0])
    members["encodings.json"] = json.dumps(document).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return buf.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=True)
    return buf.getvalue()


def _replace_array(array):
    def change(members, entry):
        blob = _npy(array)
        members["encodings/0/style.npy"] = blob
        entry["arrays"][0].update(sha256=hashlib.sha256(blob).hexdigest(), dtype=str(array.dtype),
                                  shape=list(array.shape))
    return change


@pytest.mark.parametrize("change, why", [
    (_replace_array(np.array([{"evil": 1}], dtype=object)), "not a plain array"),  # a pickle: never loaded
    (_replace_array(np.full((4, 256), np.nan, np.float32)), "not finite"),
    (lambda members, entry: members.update({"encodings/0/style.npy": members["encodings/0/style.npy"][:-8]}),
     "sha256"),
    (lambda members, entry: entry["arrays"][0].update(shape=[256, 4]), "it declares"),
    (lambda members, entry: entry.update(model_id="../models"), "invalid model_id"),
    (lambda members, entry: entry.update(prompt_format=99), "prompt format 99"),
    (lambda members, entry: entry.update(cache_version=0), "cache rule 0"),
])
def test_a_bad_encoding_is_left_out_and_the_voice_comes_in(boxes, change, why):
    (lib_a, cache_a, models_a), (lib_b, cache_b, models_b) = boxes
    info, _ = encoded_voice(lib_a, cache_a, CountingEngine("fake-1"))
    data = tampered(export_voice(lib_a, cache_a, info.id, models_a), change)
    done = import_voice(lib_b, cache_b, data, models_b, max_bytes=LIMIT)
    assert done.info.id == "ms-lee" and done.reused == ()
    assert len(done.skipped) == 1 and why in done.skipped[0][1], done.skipped
    assert len(cache_b) == 0


def test_a_member_outside_the_layout_refuses_the_whole_file(boxes):
    (lib_a, cache_a, models_a), (lib_b, cache_b, models_b) = boxes
    info, _ = encoded_voice(lib_a, cache_a, CountingEngine("fake-1"))
    data = export_voice(lib_a, cache_a, info.id, models_a)
    for bad in ("../evil.npy", "encodings/0/../../x.npy", "encodings/0/style.pkl"):
        evil = tampered(data, lambda members, entry, bad=bad: members.update({bad: b"x"}))
        with pytest.raises(InputError) as refused:
            voice_file.read(evil, LIMIT)
        assert refused.value.code == "voice_file_members"
    assert lib_b.list() == []


def test_an_export_leaves_encodings_out_before_it_passes_the_import_limit(boxes):
    (lib_a, cache_a, models_a), _ = boxes
    info, _ = encoded_voice(lib_a, cache_a, CountingEngine("fake-1"))
    whole = export_voice(lib_a, cache_a, info.id, models_a)
    bare = lib_a.export(info.id)
    assert len(whole) > len(bare)
    assert export_voice(lib_a, cache_a, info.id, models_a, max_bytes=len(bare) + 10) == bare
