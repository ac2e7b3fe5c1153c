"""cosyedge.catalog.manifest's model identity: the family schema, and today's files loading unchanged.

The files "of today" are built here by hand, byte for byte as the cosyedge before the family schema
wrote them (a manifest naming only ``"engine": "cosyvoice2"``, a prompt-cache entry keyed by
sha256 over engine name + model id, a saved voice whose meta says ``"engine": "cosyvoice2"``), so a
change to the schema, the key recipe or the engine's name shows up here as a failure.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from cosyedge.audio import ConditionedPrompt
from cosyedge.config import Settings
from cosyedge.engines.loader import load_engine
from cosyedge.errors import ModelMissingError
from cosyedge.catalog.manifest import (ModelIdentity, engine_name, identity_fields, read_identity, read_manifest,
                               write_manifest)
from cosyedge.voices.library import PromptCache, VoiceLibrary
from tests.test_audio_prompt import speechlike

MODEL_ID = "cosyvoice2-int8"


def write_json(model_dir: Path, manifest: dict) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return model_dir


def todays_cosyvoice2_manifest(model_dir: Path) -> Path:
    """As `python -m cosyedge convert cosyvoice2` wrote it before the family schema."""
    return write_json(model_dir, {"engine": "cosyvoice2", "format_version": 1, "sample_rate": 24000,
                                  "quantization": "int8", "config": {}, "files": {}})


def todays_cache_key(pcm: bytes, transcript: str, engine: str, model_id: str) -> str:
    """The prompt-cache key recipe of today (cache version 1), written out independently."""
    h = hashlib.sha256(b"cosyedge-prompt-v1")
    for part in (pcm, transcript.strip().encode("utf-8"), engine.encode(), model_id.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def todays_cache_entry(directory: Path, prompt: ConditionedPrompt, transcript: str) -> Path:
    """A CosyVoice2 prompt-cache entry as today's cache stored it: ``<key>.v1.npz`` with a JSON header."""
    header = {"version": 1, "engine": "cosyvoice2", "model_id": MODEL_ID,
              "meta": {"transcript": transcript, "duration_s": 4.0, "tokens": 3}}
    buf = io.BytesIO()
    np.savez(buf, __header__=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
             embedding=np.ones(192, np.float32), tokens=np.arange(3, dtype=np.int64),
             mel=np.zeros((6, 80), np.float32))
    directory.mkdir(parents=True, exist_ok=True)
    key = todays_cache_key(prompt.pcm_bytes(), transcript, "cosyvoice2", MODEL_ID)
    path = directory / f"{key}.v1.npz"
    path.write_bytes(buf.getvalue())
    return path


def todays_saved_voice(library: Path, prompt: ConditionedPrompt, transcript: str) -> Path:
    """``prompts/library/ms-lee/`` as today's library wrote it (float WAV, transcript, meta)."""
    folder = library / "ms-lee"
    folder.mkdir(parents=True)
    wav = io.BytesIO()
    sf.write(wav, prompt.pcm, prompt.sample_rate, format="WAV", subtype="FLOAT")
    (folder / "voice.wav").write_bytes(wav.getvalue())
    (folder / "transcript.txt").write_text(transcript, encoding="utf-8")
    meta = {"format": 1, "id": "ms-lee", "name": "Ms Lee", "engine": "cosyvoice2", "model_id": MODEL_ID,
            "duration_s": 4.0, "created": 1700000000.0, "notes": []}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return folder


# ---- the schema ----------------------------------------------------------------------------------

def test_engine_names_follow_family_and_version():
    assert [engine_name("cosyvoice", v) for v in (1, 2, 3)] == ["cosyvoice1", "cosyvoice2", "cosyvoice3"]
    assert engine_name("kokoro") == "kokoro"
    assert identity_fields("cosyvoice", 2) == {"engine": "cosyvoice2", "family": "cosyvoice", "version": 2}
    assert identity_fields("kokoro") == {"engine": "kokoro", "family": "kokoro"}


def test_todays_manifests_read_as_family_and_version(tmp_path):
    cosy = read_identity(todays_cosyvoice2_manifest(tmp_path / MODEL_ID))
    assert cosy == ModelIdentity("cosyvoice", 2, MODEL_ID, "cosyvoice2") and cosy.known
    kokoro = write_json(tmp_path / "kokoro-int8", {"engine": "kokoro", "model_id": "kokoro-int8",
                                                   "version": "1.0", "files": {}})
    assert read_identity(kokoro) == ModelIdentity("kokoro", None, "kokoro-int8", "kokoro")


def test_new_manifests_write_family_and_version_and_keep_the_engine_name(tmp_path):
    model_dir = tmp_path / "kokoro-int8"
    model_dir.mkdir()
    (model_dir / "a.bin").write_bytes(b"x")
    written = write_manifest(model_dir, "kokoro", ["a.bin"], model_id="kokoro-int8", version="1.0")
    assert (written["engine"], written["family"], written["version"]) == ("kokoro", "kokoro", "1.0")
    assert read_manifest(model_dir, "")["files"]["a.bin"]["bytes"] == 1
    assert read_identity(model_dir).engine == "kokoro"
    new_cosy = write_json(tmp_path / "new", {**identity_fields("cosyvoice", 2), "files": {}})
    assert read_identity(new_cosy) == ModelIdentity("cosyvoice", 2, "new", "cosyvoice2")
    without_engine = write_json(tmp_path / "v3", {"family": "cosyvoice", "version": 3, "files": {}})
    assert read_identity(without_engine).engine == "cosyvoice3"


def test_a_contradicting_or_unknown_identity_is_refused(tmp_path):
    contradiction = write_json(tmp_path / "a", {"engine": "cosyvoice2", "family": "cosyvoice", "version": 3,
                                                "files": {}})
    with pytest.raises(ModelMissingError, match="names engine 'cosyvoice2' but family 'cosyvoice' version 3"):
        read_identity(contradiction)
    unknown = read_identity(write_json(tmp_path / "b", {"engine": "piper", "files": {}}))
    assert not unknown.known and unknown.engine == "piper"
    assert not read_identity(write_json(tmp_path / "c", {"family": "cosyvoice", "version": 7})).known
    with pytest.raises(ModelMissingError, match="unknown engine 'piper'"):
        load_engine(Settings(models_dir=tmp_path, model="b"))
    with pytest.raises(ModelMissingError, match="unreadable"):
        read_identity(write_json(tmp_path / "d", {"files": {}}))


def test_a_cosyvoice_version_the_runtime_does_not_run_is_named(tmp_path, monkeypatch):
    from cosyedge.engines.cosyvoice.common import manifest as cosyvoice_manifest
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir

    # Every version the schema knows runs now; a runtime without v3 must still name it.
    monkeypatch.setattr(cosyvoice_manifest, "RUNS_VERSIONS", (1, 2))
    write_json(tmp_path / "v3", {**identity_fields("cosyvoice", 3), "format_version": 1, "files": {}})
    with pytest.raises(ModelMissingError, match="CosyVoice version 3; this cosyedge runs CosyVoice 1, 2"):
        ModelDir.load(tmp_path / "v3")
    write_json(tmp_path / "k", {**identity_fields("kokoro"), "files": {}})
    with pytest.raises(ModelMissingError, match="not a CosyVoice manifest"):
        ModelDir.load(tmp_path / "k")


# ---- today's files load unchanged ----------------------------------------------------------------

def legacy_engine(model_dir: Path):
    """A CosyVoiceEngine named from today's manifest the way ``CosyVoiceEngine.load`` names it (its
    parts are stand-ins: encoding a prompt would fail, so only a cache hit passes)."""
    from cosyedge.engines.cosyvoice.common.engine import CosyVoiceEngine
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir

    identity = ModelDir(model_dir, json.loads((model_dir / "manifest.json").read_text())).identity

    def no_encoder():
        raise AssertionError("the cached prompt of today was not found: encoding again")

    return CosyVoiceEngine(identity.model_id, SimpleNamespace(config=None), None, None, None, no_encoder,
                           version=identity.version)


def test_todays_cached_prompt_and_saved_voice_are_used_unchanged(tmp_path):
    model_dir = todays_cosyvoice2_manifest(tmp_path / "models" / MODEL_ID)
    engine = legacy_engine(model_dir)
    assert (engine.name, engine.model_id) == ("cosyvoice2", MODEL_ID)

    prompts = tmp_path / "prompts"
    prompt = ConditionedPrompt(pcm=speechlike(4.0, seed=3))
    entry = todays_cache_entry(prompts / "cache", prompt, "大家好")
    todays_saved_voice(prompts / "library", prompt, "大家好")

    library = VoiceLibrary(prompts / "library")
    (info,) = library.list()
    assert (info.id, info.name, info.engine, info.model_id) == ("ms-lee", "Ms Lee", "cosyvoice2", MODEL_ID)
    saved, transcript, _ = library.load("ms-lee")
    cache = PromptCache(prompts / "cache")
    voice = cache.get_or_encode(engine, saved, transcript)  # the saved voice's way: library -> cache
    assert (cache.hits, cache.misses, cache.rebuilds) == (1, 0, 0) and entry.is_file()
    assert voice.engine == engine.name and voice.model_id == engine.model_id  # the engine's own check
    np.testing.assert_array_equal(voice.arrays["tokens"], np.arange(3))
    cache.get_or_encode(engine, prompt, "大家好")  # an upload of the same audio
    assert cache.hits == 2


def test_the_service_reads_todays_manifest_before_any_load(tmp_path):
    from cosyedge.service.facade import Service

    todays_cosyvoice2_manifest(tmp_path / "models" / MODEL_ID)
    service = Service(Settings(root=tmp_path, model=MODEL_ID), engine_factory=lambda: None)
    try:
        assert service.model_engine_name() == "cosyvoice2"
        assert service.abilities() == (True, True)  # NATIVE_ABILITIES by engine name
    finally:
        service.close()
