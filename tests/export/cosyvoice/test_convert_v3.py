"""`python -m cosyedge convert cosyvoice3`: the tiny official-layout fixture directory, and bad input.

Needs torch (the converter reads .pt files): runs in .venv-ref. Every refusal is one line naming the
problem, and nothing is left under the output's parent (no model, no ``.partial`` folder).
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch", reason="the converter needs torch: run in .venv-ref")
pytestmark = [pytest.mark.reference, pytest.mark.slow]

from cosyedge import cli  # noqa: E402
from cosyedge.catalog.manifest import sha256_file  # noqa: E402
from tests.helpers import cosyvoice3_fixture as fixture  # noqa: E402


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return fixture.write_official_dir(tmp_path_factory.mktemp("src") / "Fun-CosyVoice3-0.5B")


def _copy(official, tmp_path):
    return shutil.copytree(official, tmp_path / "src" / official.name)


def _refused(capsys, tmp_path, argv) -> str:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    assert cli.main(argv + ["--out", str(models / "m")]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert list(models.iterdir()) == []  # nothing half-written
    return err


def test_converts_with_int8_by_default_and_hashes_every_file(official, tmp_path, capsys):
    out = tmp_path / "models" / "cosyvoice3-tiny"
    assert cli.main(["convert", "cosyvoice3", "--src", str(official), "--out", str(out)]) == 0
    assert "LLM read from llm.pt" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["family"], manifest["version"], manifest["engine"]) == ("cosyvoice", 3, "cosyvoice3")
    assert manifest["quantization"] == "int8"
    assert manifest["graphs"]["flow_estimator.onnx"]["precision"] == "int8"
    # the streamed DiT (upstream's streaming=True attention) and upstream's hop schedule
    assert manifest["graphs"]["flow_estimator_stream.onnx"]["precision"] == "int8"
    assert manifest["config"]["flow"]["stream"] == {
        "estimator": "flow_estimator_stream.onnx", "kv_layout": "chunk_blocked", "chunk_frames": 50,
        "hop_tokens": 25, "max_hop_tokens": 100, "hop_scale": 2, "attention_layers": 2, "heads": 4,
        "head_dim": 16, "conv_layers": 2, "conv_tail": 30, "conv_channels": 64, "kv_dtype": "float16"}
    assert manifest["config"]["llm"]["stop_from"] == 6561
    for name, entry in manifest["files"].items():
        assert sha256_file(out / name) == entry["sha256"], name
    assert not (out / "hift_sine_noise.npy").exists()  # upstream's noise buffers are not stored


def test_llm_rl_file_is_used_when_llm_pt_is_absent(official, tmp_path, capsys):
    src = _copy(official, tmp_path)
    (src / "llm.pt").rename(src / "llm.rl.pt")
    out = tmp_path / "models" / "m"
    assert cli.main(["convert", "cosyvoice3", "--src", str(src), "--out", str(out), "--quantize", "none"]) == 0
    assert "LLM read from llm.rl.pt" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["quantization"] == "fp32"


def test_cosyvoice2_directory_given_as_cosyvoice3(official, tmp_path, capsys):
    src = _copy(official, tmp_path)
    (src / "cosyvoice3.yaml").rename(src / "cosyvoice2.yaml")
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice3", "--src", str(src)])
    assert "cosyvoice2.yaml" in err and "convert cosyvoice2" in err


def test_cosyvoice3_directory_given_as_cosyvoice2(official, tmp_path, capsys):
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice2", "--src", str(official)])
    assert "cosyvoice3.yaml" in err and "convert cosyvoice3" in err


def test_missing_file_is_named(official, tmp_path, capsys):
    src = _copy(official, tmp_path)
    (src / "hift.pt").unlink()
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice3", "--src", str(src)])
    assert "hift.pt" in err and "Fun-CosyVoice3-0.5B" in err


def test_truncated_file_is_named(official, tmp_path, capsys):
    src = _copy(official, tmp_path)
    data = (src / "flow.pt").read_bytes()
    (src / "flow.pt").write_bytes(data[: len(data) // 2])
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice3", "--src", str(src)])
    assert "flow.pt" in err and "truncated" in err


def test_unknown_yaml_is_named(official, tmp_path, capsys):
    src = _copy(official, tmp_path)
    yaml = src / "cosyvoice3.yaml"
    yaml.write_text(yaml.read_text().replace("CausalMaskedDiffWithDiT", "MaskedDiffWithXvec"))
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice3", "--src", str(src)])
    assert "MaskedDiffWithXvec" in err and "CausalMaskedDiffWithDiT" in err


def test_cosyvoice2_weights_under_a_cosyvoice3_yaml(official, tmp_path, capsys, tmp_path_factory):
    from tests.helpers.cosyvoice_tiny import write_tiny_checkpoint

    v2 = write_tiny_checkpoint(tmp_path_factory.mktemp("v2") / "CosyVoice2-0.5B", presets=False)["dir"]
    src = _copy(official, tmp_path)
    shutil.copyfile(v2 / "llm.pt", src / "llm.pt")
    err = _refused(capsys, tmp_path, ["convert", "cosyvoice3", "--src", str(src), "--steps", "llm"])
    assert "CosyVoice2" in err and "llm.pt" in err
