"""Prompt cache (hit/miss/corruption/bounds/unwritable) and the saved voice library."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cosyedge.audio import ConditionedPrompt
from cosyedge.engines.base import VoicePrompt
from cosyedge.errors import ConflictError, InputError, NameError_, NotFoundError, PayloadTooLargeError
from cosyedge.voices.library import CACHE_VERSION, PromptCache, VoiceLibrary, name_to_id, prompt_key
from tests.test_audio_prompt import speechlike

LIMIT = 20 * 1024 * 1024


class CountingEngine:
    """Encodes a prompt into a small VoicePrompt and counts how often it was asked to."""

    name = "fake"

    def __init__(self, model_id: str = "fake-1") -> None:
        self.model_id = model_id
        self.encodes = 0

    def encode_prompt(self, audio, sample_rate, transcript, *, cancelled=None):
        self.encodes += 1
        return VoicePrompt(engine=self.name, model_id=self.model_id,
                           arrays={"style": np.full((4, 256), float(audio.mean()), np.float32)},
                           meta={"transcript": transcript, "n": self.encodes})


def prompt(seed: int = 0, seconds: float = 4.0) -> ConditionedPrompt:
    return ConditionedPrompt(pcm=speechlike(seconds, seed=seed))


# ---- prompt cache ---------------------------------------------------------------------------------

def test_miss_encodes_then_hit_skips_encoding(tmp_path):
    cache, engine, p = PromptCache(tmp_path / "cache"), CountingEngine(), prompt()
    first = cache.get_or_encode(engine, p, "hello")
    assert (engine.encodes, cache.misses, cache.hits) == (1, 1, 0)
    second = cache.get_or_encode(engine, prompt(), "hello")  # same audio, new object
    assert (engine.encodes, cache.misses, cache.hits) == (1, 1, 1)
    np.testing.assert_array_equal(first.arrays["style"], second.arrays["style"])
    assert len(list((tmp_path / "cache").glob(f"*.v{CACHE_VERSION}.npz"))) == 1
    # a fresh cache object on the same folder (a restart) still hits
    again = PromptCache(tmp_path / "cache")
    again.get_or_encode(engine, p, "hello")
    assert (engine.encodes, again.hits) == (1, 1)


def test_key_covers_audio_transcript_engine_and_model(tmp_path):
    cache, engine = PromptCache(tmp_path), CountingEngine()
    cache.get_or_encode(engine, prompt(0), "a")
    cache.get_or_encode(engine, prompt(1), "a")
    cache.get_or_encode(engine, prompt(0), "b")
    cache.get_or_encode(CountingEngine("fake-2"), prompt(0), "a")
    assert cache.misses == 4 and cache.hits == 0 and engine.encodes == 3
    pcm = prompt().pcm_bytes()
    assert prompt_key(pcm, "ab", "e", "m") != prompt_key(pcm, "a", "be", "m")


def test_corrupt_entry_is_rebuilt_with_a_warning(tmp_path, caplog):
    cache, engine, p = PromptCache(tmp_path), CountingEngine(), prompt()
    cache.get_or_encode(engine, p, None)
    (entry,) = tmp_path.glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    with caplog.at_level(logging.WARNING, logger="cosyedge.voices.library"):
        rebuilt = cache.get_or_encode(engine, p, None)
    assert engine.encodes == 2 and cache.rebuilds == 1
    assert "corrupt or stale" in caplog.text
    assert rebuilt.engine == "fake"
    cache.get_or_encode(engine, p, None)
    assert engine.encodes == 2 and cache.hits == 1  # the rebuilt entry is good again


def test_entry_for_another_model_is_stale(tmp_path):
    cache, p = PromptCache(tmp_path), prompt()
    old = CountingEngine("fake-1")
    key = prompt_key(p.pcm_bytes(), None, "fake", "fake-2")
    (tmp_path / f"{key}.v{CACHE_VERSION}.npz").write_bytes(old.encode_prompt(p.pcm, 24000, None).to_bytes())
    new = CountingEngine("fake-2")
    assert cache.get_or_encode(new, p, None).model_id == "fake-2"
    assert new.encodes == 1 and cache.rebuilds == 1


def test_other_version_files_are_swept(tmp_path):
    stale = tmp_path / ("0" * 64 + f".v{CACHE_VERSION + 1}.npz")
    stale.write_bytes(b"old")
    PromptCache(tmp_path)
    assert not stale.exists()


def test_lru_bound_by_count(tmp_path):
    cache, engine = PromptCache(tmp_path, max_entries=2), CountingEngine()
    a, b, c = prompt(0), prompt(1), prompt(2)
    cache.get_or_encode(engine, a, None)
    cache.get_or_encode(engine, b, None)
    cache.get_or_encode(engine, a, None)  # a is now the most recent
    cache.get_or_encode(engine, c, None)  # evicts b
    assert len(cache) == 2
    cache.get_or_encode(engine, a, None)
    assert engine.encodes == 3
    cache.get_or_encode(engine, b, None)
    assert engine.encodes == 4


def test_lru_bound_by_bytes(tmp_path):
    engine = CountingEngine()
    size = len(engine.encode_prompt(prompt().pcm, 24000, None).to_bytes())
    cache = PromptCache(tmp_path, max_entries=100, max_bytes=int(size * 2.5))
    for seed in range(5):
        cache.get_or_encode(engine, prompt(seed), None)
    assert len(cache) == 2
    assert sum(f.stat().st_size for f in tmp_path.glob("*.npz")) <= size * 2.5


def test_unwritable_directory_degrades_to_memory(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="cosyedge.voices.library"):
        cache = PromptCache(blocker / "cache")
    assert not cache.on_disk and "memory" in caplog.text
    engine = CountingEngine()
    cache.get_or_encode(engine, prompt(), "x")
    cache.get_or_encode(engine, prompt(), "x")
    assert engine.encodes == 1 and cache.hits == 1


# ---- voice library --------------------------------------------------------------------------------

@pytest.fixture()
def lib(tmp_path) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / "library")


def save(lib: VoiceLibrary, name: str, seed: int = 0, transcript: str = "hello there"):
    return lib.save(name, prompt(seed), transcript, engine="kokoro", model_id="kokoro-int8")


def test_save_list_load_rename_delete(lib):
    info = save(lib, "Ms Smith")
    assert info.id == "ms-smith" and info.name == "Ms Smith"
    save(lib, "alice_2", seed=1)
    assert [v.id for v in lib.list()] == ["alice_2", "ms-smith"]
    audio, transcript, loaded = lib.load("ms-smith")
    np.testing.assert_array_equal(audio.pcm, prompt(0).pcm)  # float WAV: bit-identical
    assert transcript == "hello there" and loaded.engine == "kokoro"
    with pytest.raises(NameError_, match="already exists"):
        save(lib, "MS SMITH")
    renamed = lib.rename("ms-smith", "Teacher Smith")  # the id stays: references keep resolving
    assert renamed.id == "ms-smith" and lib.get("ms-smith").name == "Teacher Smith"
    assert lib.load("ms-smith")[1] == "hello there"
    with pytest.raises(NameError_, match="already exists"):
        lib.rename("ms-smith", "alice_2")
    with pytest.raises(NameError_, match="already exists"):  # the name is taken, not the id
        save(lib, "Teacher Smith")
    assert save(lib, "Ms Smith", seed=2).id == "ms-smith-2"  # the id is taken by Teacher Smith
    lib.delete("ms-smith")
    assert [v.id for v in lib.list()] == ["alice_2", "ms-smith-2"]
    with pytest.raises(NotFoundError):
        lib.delete("ms-smith")
    assert not [p for p in lib.directory.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_chinese_name_gets_a_pinyin_id(lib):
    info = save(lib, "王老师")
    assert info.id == "wang-lao-shi" and lib.get("wang-lao-shi").name == "王老师"


@pytest.mark.parametrize("name, voice_id", [
    ("Ms Wang", "ms-wang"), ("王老师", "wang-lao-shi"), ("Ms Wang 王老师", "ms-wang-wang-lao-shi"),
    ("王老师 Ms Wang", "wang-lao-shi-ms-wang"), ("王老师2", "wang-lao-shi-2"), ("银行行长", "yin-hang-hang-zhang"),
    ("Mr. Li", "mr.-li"), ("Teacher_Lee", "teacher_lee"), ("a  -  b", "a-b"), ("Lee_", "lee"),
])
def test_one_rule_makes_ids_from_latin_chinese_and_mixed_names(name, voice_id):
    """The rule (voices.library.id_from_name): Latin lower-cased, Chinese as pinyin, one '-' between
    runs. "Ms Wang 王老师" was mswang-wang-lao-shi: the Latin part lost its space."""
    assert name_to_id(name) == (name, voice_id)


def test_a_rename_keeps_the_id_of_a_chinese_and_of_an_old_style_voice(lib):
    """Renaming 王老师 to "Ms Wang 王老师" turned wang-lao-shi into mswang-wang-lao-shi; now a voice's
    id is its folder's name, fixed at save: one made by the old rule keeps it too."""
    assert save(lib, "王老师").id == "wang-lao-shi"
    assert lib.rename("wang-lao-shi", "Ms Wang 王老师").id == "wang-lao-shi"
    assert [(v.id, v.name) for v in lib.list()] == [("wang-lao-shi", "Ms Wang 王老师")]
    old_style = lib.directory / "mswang-wang-lao-shi"  # an id the earlier rule made, on disk
    shutil.copytree(lib.directory / "wang-lao-shi", old_style)
    lib.rename("mswang-wang-lao-shi", "王老师")
    assert sorted(v.id for v in lib.list()) == ["mswang-wang-lao-shi", "wang-lao-shi"]
    assert lib.get("mswang-wang-lao-shi").name == "王老师" and lib.load("mswang-wang-lao-shi")[2].id \
        == "mswang-wang-lao-shi"


@pytest.mark.parametrize("bad", ["../evil", "..", "a/b", "/etc/passwd", "a\\b", "a\x00b", "x" * 65,
                                 "", "   ", "-dash", ".hidden", "tab\there", "名" * 33, None])
def test_bad_names_are_refused(lib, bad):
    with pytest.raises(NameError_):
        save(lib, bad)
    assert lib.list() == []
    assert not list(lib.directory.glob("*")) if lib.directory.exists() else True


@pytest.mark.parametrize("bad_id", ["../library", "..", "a/../../x", "UPPER", "a\x00", "x" * 70])
def test_ids_from_outside_cannot_escape(lib, bad_id):
    save(lib, "keep")
    for call in (lib.get, lib.delete, lib.export, lambda i: lib.rename(i, "new")):
        with pytest.raises(NameError_):
            call(bad_id)
    assert [v.id for v in lib.list()] == ["keep"]


def test_export_import_round_trip(lib, tmp_path):
    save(lib, "Round Trip", transcript="今日は良い天気です")
    blob = lib.export("round-trip")
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        assert sorted(zf.namelist()) == ["meta.json", "transcript.txt", "voice.wav"]
        assert json.loads(zf.read("meta.json"))["model_id"] == "kokoro-int8"
    other = VoiceLibrary(tmp_path / "other")
    info = other.import_zip(blob, max_bytes=LIMIT)
    assert (info.id, info.name, info.engine) == ("round-trip", "Round Trip", "kokoro")
    audio, transcript, _ = other.load("round-trip")
    original, _, _ = lib.load("round-trip")
    assert transcript == "今日は良い天気です"
    assert abs(audio.duration_s - original.duration_s) < 0.05
    assert np.corrcoef(audio.pcm[:original.pcm.size], original.pcm[:audio.pcm.size])[0, 1] > 0.99
    for name in (None, "Copy"):  # its id is here: refused with a code unless asked to rename
        with pytest.raises(ConflictError) as refused:
            other.import_zip(blob, max_bytes=LIMIT, name=name)
        assert refused.value.code == "voice_exists" and refused.value.params["name"] == "Round Trip"
    assert other.import_zip(blob, max_bytes=LIMIT, name="Copy", rename=True).id == "copy"
    second = other.import_zip(blob, max_bytes=LIMIT, rename=True)  # a copy, numbered
    assert (second.id, second.name) == ("round-trip-2", "Round Trip 2")
    assert other.import_zip(blob, max_bytes=LIMIT, overwrite=True).id == "round-trip"
    assert sorted(v.id for v in other.list()) == ["copy", "round-trip", "round-trip-2"]


def test_an_import_keeps_the_id_a_renamed_voice_had(lib, tmp_path):
    """A voice renamed on one box keeps its id there and on the box it is imported into, so a REST,
    OpenAI or Wyoming reference made with that id works on both."""
    save(lib, "王老师")
    lib.rename("wang-lao-shi", "Ms Wang 王老师")
    other = VoiceLibrary(tmp_path / "other")
    info = other.import_zip(lib.export("wang-lao-shi"), max_bytes=LIMIT)
    assert (info.id, info.name) == ("wang-lao-shi", "Ms Wang 王老师")
    old = lib.export("wang-lao-shi")  # an export without an id (older ones may lack it): the rule's
    with zipfile.ZipFile(io.BytesIO(old)) as zf:
        members = {m: zf.read(m) for m in zf.namelist()}
    meta = json.loads(members["meta.json"])
    del meta["id"]
    members["meta.json"] = json.dumps(meta).encode()
    assert VoiceLibrary(tmp_path / "third").import_zip(_zip(members), max_bytes=LIMIT).id == "ms-wang-wang-lao-shi"


def test_rename_and_import_refuse_a_preset_name_and_write_nothing(lib, tmp_path):
    """A preset wins when a voice is asked for by name, so no path may give a saved voice one."""
    presets = ("female_1", "male_1")
    save(lib, "Ms Lee")
    for name in ("male_1", " Female 1 "):
        with pytest.raises(NameError_) as info:
            lib.rename("ms-lee", name, presets=presets)
        assert info.value.code == "voice_name_preset"
    assert [(v.id, v.name) for v in lib.list()] == [("ms-lee", "Ms Lee")]
    blob = lib.export("ms-lee")
    other = VoiceLibrary(tmp_path / "other")
    with pytest.raises(NameError_) as info:
        other.import_zip(blob, max_bytes=LIMIT, name="MALE_1", presets=presets)
    assert info.value.code == "voice_name_preset"
    lib.rename("ms-lee", "male_1")  # a box whose presets are others (or one before this check)
    with pytest.raises(NameError_) as info:  # the zip's own name is checked too
        other.import_zip(lib.export("ms-lee"), max_bytes=LIMIT, presets=presets)
    assert info.value.code == "voice_name_preset"
    assert other.list() == []


def test_consent_is_recorded_and_travels_in_the_zip(lib, tmp_path):
    from cosyedge.voices.consent import ConsentRecord

    record = ConsentRecord(given_at=1_780_000_000.5, reference="cons_abc")
    lib.save("Agreed", prompt(), "hi", engine="kokoro", model_id="kokoro-int8", consent=record)
    assert lib.get("agreed").consent == record
    assert lib.rename("agreed", "Still Agreed").consent == record
    blob = lib.export("agreed")
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        assert json.loads(zf.read("meta.json"))["consent"] == {"given_at": 1_780_000_000.5,
                                                               "reference": "cons_abc"}
    assert VoiceLibrary(tmp_path / "other").import_zip(blob, max_bytes=LIMIT).consent == record


def test_a_voice_saved_before_consent_loads_as_not_recorded(lib, tmp_path):
    """A meta.json (or an exported zip) from before consent was asked for has no "consent" key."""
    from cosyedge.voices.consent import describe

    save(lib, "Old Voice")
    meta_path = lib.directory / "old-voice" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["consent"]
    meta_path.write_text(json.dumps(meta))
    assert lib.get("old-voice").consent is None and describe(lib.get("old-voice").consent) == (
        "consent not recorded")
    audio, _, _ = lib.load("old-voice")  # still usable
    assert audio.duration_s > 1
    blob = lib.export("old-voice")
    imported = VoiceLibrary(tmp_path / "other").import_zip(blob, max_bytes=LIMIT)
    assert imported.consent is None  # never invented on the way in


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_import_validates_everything_before_writing(lib, tmp_path):
    save(lib, "Source")
    with zipfile.ZipFile(io.BytesIO(lib.export("source"))) as zf:
        good = {n: zf.read(n) for n in zf.namelist()}
    target = VoiceLibrary(tmp_path / "target")
    meta = json.loads(good["meta.json"])
    cases = [
        (b"not a zip", InputError),
        (_zip({**good, "../evil.txt": b"x"}), InputError),
        (_zip({k: v for k, v in good.items() if k != "transcript.txt"}), InputError),
        (_zip({**good, "meta.json": b"{not json"}), InputError),
        (_zip({**good, "meta.json": json.dumps({**meta, "name": "../x"}).encode()}), NameError_),
        (_zip({**good, "meta.json": json.dumps({**meta, "model_id": "../../x"}).encode()}), InputError),
        (_zip({**good, "voice.wav": b"RIFF junk"}), InputError),
        (_zip({**good, "transcript.txt": b"\xff\xfe bad"}), InputError),
    ]
    for blob, error in cases:
        with pytest.raises(error):
            target.import_zip(blob, max_bytes=LIMIT)
    with pytest.raises(PayloadTooLargeError):
        target.import_zip(_zip(good), max_bytes=1000)
    assert target.list() == []
    assert not target.directory.exists() or not list(target.directory.iterdir())


def _patched(blob: bytes, edits) -> bytes:
    """``blob`` with little-endian fields set: (fmt, offset from a header signature or from the end)."""
    out = bytearray(blob)
    for where, fmt, offset, value in edits:
        if where == "end":
            struct.pack_into(fmt, out, len(out) + offset, value)
            continue
        pos = out.find(where)
        while pos != -1:  # every local (PK 3 4) or central (PK 1 2) header
            struct.pack_into(fmt, out, pos + offset, value)
            pos = out.find(where, pos + 4)
    return bytes(out)


def test_a_damaged_or_foreign_zip_is_a_clear_input_error(lib, tmp_path):
    save(lib, "Source")
    good = lib.export("source")
    wav = zipfile.ZipFile(io.BytesIO(good)).getinfo("voice.wav")
    data_start = wav.header_offset + 30 + len(wav.filename)
    local, central = b"PK\x03\x04", b"PK\x01\x02"
    cases = {  # each was a traceback from zipfile (a 500 on the web routes), not an InputError
        "deflate data damaged (a bad copy)": good[:data_start] + b"\xff" * 4 + good[data_start + 4:],
        "password-protected": _patched(good, [(local, "<H", 6, 1), (central, "<H", 8, 1)]),
        "unknown compression method": _patched(good, [(local, "<H", 8, 99), (central, "<H", 10, 99)]),
        "central directory offset past the end": _patched(good, [("end", "<I", -6, 10 * len(good))]),
        "needs a newer zip version": _patched(good, [(central, "<H", 6, 99)]),
    }
    target = VoiceLibrary(tmp_path / "target")
    for blob in cases.values():
        with pytest.raises(InputError, match="voice file"):
            target.import_zip(blob, max_bytes=LIMIT)
    assert target.list() == []


def test_name_to_id_examples():
    assert name_to_id("  My Voice 2 ") == ("My Voice 2", "my-voice-2")
    assert name_to_id("a" * 64)[1] == "a" * 64


def test_damaged_saved_voice_is_a_clear_not_found(lib):
    save(lib, "Broken")
    (lib.directory / "broken" / "voice.wav").write_bytes(b"garbage")
    with pytest.raises(NotFoundError, match="damaged"):
        lib.load("broken")


def test_two_saves_of_one_new_name_at_once_the_second_is_told_it_exists(lib, monkeypatch):
    """Both pass the "already exists" check; the second rename lands on the first one's folder. It
    was a raw OSError (ENOTEMPTY); the first voice stays intact."""
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self.name == "ms-lee" else real_exists(self))
    save(lib, "Ms Lee", seed=1)
    with pytest.raises(NameError_, match="already exists"):
        save(lib, "Ms Lee", seed=2)
    monkeypatch.setattr(Path, "exists", real_exists)
    audio, _, _ = lib.load("ms-lee")
    np.testing.assert_array_equal(audio.pcm, prompt(1).pcm)
    assert not [p for p in lib.directory.iterdir() if p.name.startswith(".")]


def test_a_rename_that_cannot_write_leaves_the_voice_as_it_was(lib, monkeypatch):
    """A rename writes one file, its meta.json, atomically (temp + rename): a failed write keeps the old."""
    save(lib, "Ms Lee")
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (_ for _ in ()).throw(PermissionError(13, "denied")))
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(PermissionError(13, "denied")))
    with pytest.raises(PermissionError):
        lib.rename("ms-lee", "Teacher Lee")
    monkeypatch.setattr(os, "rename", real_rename)
    monkeypatch.undo()
    assert lib.get("ms-lee").name == "Ms Lee"


def test_names_that_sound_alike_get_ids_of_their_own(lib):
    """汪老师 and 王老师 are both wang-lao-shi in pinyin: the second was refused as "already exists"
    although no voice had its name. The same name again (case, spaces) is still refused."""
    first = save(lib, "王老师")
    second = save(lib, "汪老师", seed=1)
    assert (first.id, second.id) == ("wang-lao-shi", "wang-lao-shi-2")
    assert lib.get("wang-lao-shi-2").name == "汪老师" and lib.get("wang-lao-shi").name == "王老师"
    with pytest.raises(NameError_, match="named '汪老师'"):
        save(lib, "汪老师", seed=2)
    save(lib, "Ms  Lee")
    with pytest.raises(NameError_, match="already exists"):
        save(lib, "ms lee")
    with pytest.raises(NameError_, match="named '王老师'"):
        lib.rename("ms-lee", "王老师")
    assert lib.rename("ms-lee", "望老师").id == "ms-lee"   # a third name with the same sound: the id stays
    assert save(lib, "旺老师", seed=3).id == "wang-lao-shi-3"


# ---- one transcript rule for the key; entries an engine no longer makes -----------------------------

class ClosestEngine(CountingEngine):
    """An engine that cannot clone, whose encodings say which built-in voice they are (like Kokoro's)."""

    def __init__(self, choice: str = "female_2") -> None:
        from cosyedge.engines.base import Capabilities

        super().__init__()
        self.capabilities = Capabilities(native_clone=False, native_instruct=False, languages=("en",),
                                         sample_rate=24000)
        self.choice = choice
        self.transcripts: list[object] = []

    def encode_prompt(self, audio, sample_rate, transcript, *, cancelled=None):
        self.transcripts.append(transcript)
        voice = super().encode_prompt(audio, sample_rate, transcript)
        voice.meta.update(method="closest", preset_voice=self.choice)
        return voice

    def is_current(self, voice):
        return voice.meta.get("method") == "closest"

    def sounded(self, voice):
        return voice.meta.get("preset_voice") if self.is_current(voice) else "older"


def test_an_engine_that_cannot_clone_is_keyed_and_encoded_without_the_transcript(tmp_path):
    """Save time (`library save --encode`: the typed transcript) and use time (the service: none on an
    engine that cannot clone) read one entry: the cache applies one rule to both."""
    from cosyedge.voices.library import key_transcript

    cache, engine = PromptCache(tmp_path), ClosestEngine()
    cache.get_or_encode(engine, prompt(), "what the teacher said")
    cache.get_or_encode(engine, prompt(), None)
    cache.get_or_encode(engine, prompt(), "  another transcript ")
    assert (cache.misses, cache.hits, engine.transcripts) == (1, 2, [None])
    cloning = CountingEngine()  # no capabilities: clones; its transcript is part of the key
    assert key_transcript(cloning, "  hi ") == "hi" and key_transcript(cloning, " ") is None
    assert key_transcript(engine, "hi") is None


def test_an_entry_the_engine_no_longer_makes_is_made_again_and_says_its_sound_changed_once(tmp_path):
    cache, engine = PromptCache(tmp_path), ClosestEngine()
    key = prompt_key(prompt().pcm_bytes(), None, engine.name, engine.model_id)
    old = VoicePrompt(engine.name, engine.model_id, arrays={"style": np.zeros((510, 1, 256), np.float32)},
                      meta={"method": "approximate voice match", "similarity_before": 0.3, "similarity_after": 0.4})
    (tmp_path / f"{key}.v{CACHE_VERSION}.npz").write_bytes(old.to_bytes())  # a cache entry of the old match
    first = cache.get_or_encode(engine, prompt(), None)
    assert (first.meta["preset_voice"], first.meta["changed_from"]) == ("female_2", "older")
    assert cache.refreshed == 1 and engine.encodes == 1
    second = cache.get_or_encode(engine, prompt(), None)
    assert "changed_from" not in second.meta and cache.hits == 1 and engine.encodes == 1


def test_a_saved_voice_records_what_it_sounds_like_and_tells_when_that_changes(lib):
    info = lib.save("Ms Lee", prompt(), "hi", engine="kokoro", model_id="kokoro-int8")
    assert lib.record_encoding(info.id, "kokoro", "kokoro-int8", "female_2") is None  # first use: nothing before
    assert lib.get(info.id).sounds == (("kokoro/kokoro-int8", "female_2"),)
    assert lib.record_encoding(info.id, "kokoro", "kokoro-int8", "female_2") is None
    assert lib.record_encoding(info.id, "kokoro", "kokoro-int8", "female_1") == "female_2"
    assert lib.record_encoding(info.id, "cosyvoice2", "cosyvoice2-int8") is None  # a clone has no name
    assert lib.get(info.id).encoded_for == ("kokoro/kokoro-int8", "cosyvoice2/cosyvoice2-int8")


def test_a_voice_used_before_its_sound_was_recorded_is_told_once(lib):
    """A meta.json of an older version: encoded for Kokoro by the removed voice match, no ``sounds``."""
    from cosyedge.voices.library import EARLIER_ENCODING

    info = lib.save("Ms Lee", prompt(), "hi", engine="kokoro", model_id="kokoro-int8")
    meta_path = lib.directory / info.id / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("sounds")
    meta["encoded_for"] = ["kokoro/kokoro-int8"]
    meta_path.write_text(json.dumps(meta))
    assert lib.get(info.id).sounds == ()
    assert lib.record_encoding(info.id, "kokoro", "kokoro-int8", "male_1") == EARLIER_ENCODING
    assert lib.record_encoding(info.id, "kokoro", "kokoro-int8", "male_1") is None


# ---- the library's bound ---------------------------------------------------------------------------

def test_the_library_refuses_saves_past_its_bound_and_removes_nothing(tmp_path):
    from cosyedge.errors import StorageFullError

    lib = VoiceLibrary(tmp_path / "library", max_voices=2)
    first, second = save(lib, "One"), save(lib, "Two", seed=1)
    before = {p.name: p.read_bytes() for p in (lib.directory / "one").iterdir()}
    with pytest.raises(StorageFullError) as full:
        save(lib, "Three", seed=2)
    assert full.value.code == "voice_library_full" and full.value.http_status == 507
    assert full.value.params["voices"] == 2 and full.value.params["max_voices"] == 2
    with pytest.raises(StorageFullError):  # an import is a save
        lib.import_zip(lib.export("one"), max_bytes=LIMIT, rename=True)
    assert [v.id for v in lib.list()] == ["one", "two"]  # nothing removed to make room
    assert {p.name: p.read_bytes() for p in (lib.directory / "one").iterdir()} == before
    assert lib.save("One", prompt(3), "again", engine="kokoro", model_id="kokoro-int8",
                    overwrite=True).id == "one"  # a voice replaced takes no more room
    assert not [p for p in lib.directory.iterdir() if p.name.startswith(".")]
    usage = lib.usage()
    assert (usage.voices, usage.room) == (2, 0) and usage.bytes > 0


def test_a_library_over_a_new_bound_still_lists_loads_and_renames(tmp_path):
    """A box already past a bound set later (or lowered) keeps every voice usable; only new saves
    are refused, by size as by count."""
    from cosyedge.errors import StorageFullError

    roomy = VoiceLibrary(tmp_path / "library")
    for i in range(3):
        save(roomy, f"Voice {i}", seed=i)
    size = roomy.usage().bytes
    tight = VoiceLibrary(tmp_path / "library", max_voices=1, max_bytes=size // 2)
    assert len(tight.list()) == 3 and tight.load("voice-2")[1] == "hello there"
    assert tight.rename("voice-1", "Renamed").id == "voice-1"
    tight.set_transcript("voice-0", "still editable")
    with pytest.raises(StorageFullError):
        save(tight, "Four", seed=4)
    by_size = VoiceLibrary(tmp_path / "library", max_bytes=size + 1000)  # room for the count, not the bytes
    with pytest.raises(StorageFullError) as full:
        save(by_size, "Four", seed=4)
    assert full.value.params["needed_mb"] > 0
    tight.delete("voice-2")
    assert len(tight.list()) == 2
