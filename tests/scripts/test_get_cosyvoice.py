"""scripts/get_cosyvoice.py up to the network boundary: the hub clients are replaced by fakes."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from tests.helpers import REPO

pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


SCRIPT = REPO / "scripts" / "get_cosyvoice.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("get_cosyvoice", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_download_falls_back_and_reports_every_hub(script, tmp_path):
    calls = []

    def broken(repo, dest):
        calls.append(repo)
        raise ConnectionError("no route to host")

    def no_client(repo, dest):
        raise ImportError("modelscope")

    with pytest.raises(script.FetchError) as err:
        script.download("auto", tmp_path, {"modelscope": no_client, "huggingface": broken})
    assert "pip install modelscope" in str(err.value) and "no route to host" in str(err.value)
    assert calls == ["FunAudioLLM/CosyVoice2-0.5B"]
    assert script.main(["--dest", str(tmp_path), "--out", str(tmp_path / "out")],
                       {"modelscope": broken, "huggingface": broken}) == 2


def test_incomplete_download_names_the_missing_files(script, tmp_path, capsys):
    def partial(repo, dest):
        (dest / "cosyvoice2.yaml").write_text("x: 1\n")
        (dest / "llm.pt").write_bytes(b"")

    assert script.main(["--source", "huggingface", "--dest", str(tmp_path / "d"), "--out", str(tmp_path / "o")],
                       {"huggingface": partial}) == 2
    err = capsys.readouterr().err
    assert "llm.pt" in err and "flow.pt" in err and "merges.txt" in err and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_fetched_checkpoint_is_converted(script, tmp_path, tmp_path_factory):
    pytest.importorskip("torch", reason="the converter needs the reference: scripts/install_reference.sh")
    from tests.helpers.cosyvoice_tiny import tiny_source_dir

    source = tiny_source_dir(tmp_path_factory)
    seen = []

    def fake_modelscope(repo, dest):
        seen.append(repo)
        shutil.copytree(source, dest, dirs_exist_ok=True)

    out = tmp_path / "models" / "cosyvoice2-int8"
    assert script.main(["--dest", str(tmp_path / "dl"), "--out", str(out)], {"modelscope": fake_modelscope}) == 0
    assert seen == ["iic/CosyVoice2-0.5B"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["engine"] == "cosyvoice2" and "llm.onnx" in manifest["files"]
    assert "spk2info.npz" in manifest["files"]
    # --skip-download converts an existing copy; without --force a non-empty --out is refused.
    assert script.main(["--skip-download", "--dest", str(tmp_path / "dl"), "--out", str(out)]) == 2


def test_cosyvoice3_download_is_checked_and_converted(script, tmp_path, capsys):
    """--model cosyvoice3: the Fun-CosyVoice3 repository, its file list (llm.rl.pt will do), its converter."""
    from tests.helpers import cosyvoice3_fixture

    official = cosyvoice3_fixture.write_official_dir(tmp_path / "official")
    (official / "llm.pt").rename(official / "llm.rl.pt")
    seen = []

    def fake_hub(repo, dest):
        seen.append(repo)
        shutil.copytree(official, dest, dirs_exist_ok=True)

    out = tmp_path / "models" / "cosyvoice3-int8"
    assert script.main(["--model", "cosyvoice3", "--source", "huggingface", "--dest", str(tmp_path / "d"),
                        "--out", str(out)], {"huggingface": fake_hub}) == 0, capsys.readouterr().err
    assert seen == ["FunAudioLLM/Fun-CosyVoice3-0.5B-2512"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 3 and manifest["graphs"]["llm"]["source_file"] == "llm.rl.pt"
    (tmp_path / "d" / "speech_tokenizer_v3.onnx").unlink()
    assert script.main(["--model", "cosyvoice3", "--skip-download", "--dest", str(tmp_path / "d"),
                        "--out", str(tmp_path / "o2")]) == 2
    assert "speech_tokenizer_v3.onnx" in capsys.readouterr().err
