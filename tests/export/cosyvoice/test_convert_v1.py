"""``python -m cosyedge convert cosyvoice1``: variant detection, the manifest, the tokenizer copy, refusals.

Runs on tiny official-layout CosyVoice-300M directories (tests/helpers/cosyvoice1_reference.py).
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch", reason="the converter needs torch: scripts/install_reference.sh")
pytestmark = [pytest.mark.reference, pytest.mark.slow]  # conversions of tiny checkpoints (~10 s each)

from cosyedge.errors import InputError, ModelMissingError  # noqa: E402
from cosyedge.export.cosyvoice.v1.convert import convert, detect_variant  # noqa: E402
from cosyedge.catalog.manifest import manifest_identity, sha256_file  # noqa: E402
from tests.helpers import cosyvoice1_reference as reference  # noqa: E402
from tests.helpers.cosyvoice1_tiny import write_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return write_checkpoints(tmp_path_factory.mktemp("v1src"))


def test_variant_is_detected_from_the_directory(sources, tmp_path):
    assert {name: detect_variant(path) for name, path in sources.items()} == {
        "CosyVoice-300M": "base", "CosyVoice-300M-SFT": "sft", "CosyVoice-300M-Instruct": "instruct"}
    renamed = shutil.copytree(sources["CosyVoice-300M-SFT"], tmp_path / "my-model")
    assert detect_variant(renamed) == "sft"  # presets, no -Instruct in the name


def test_cli_converts_the_instruct_model_to_int8_by_default(sources, tmp_path, capsys):
    import whisper

    from cosyedge.cli import main

    out = tmp_path / "models" / "cv1-instruct"
    assert main(["convert", "cosyvoice1", "--src", str(sources["CosyVoice-300M-Instruct"]), "--out", str(out)]) == 0
    assert "CosyVoice-300M-Instruct, modes sft, zero_shot, cross_lingual, instruct" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    identity = manifest_identity(manifest, out)
    assert (identity.family, identity.version, identity.engine) == ("cosyvoice", 1, "cosyvoice1")
    assert manifest["variant"] == "instruct" and manifest["quantization"] == "int8"
    assert manifest["sample_rate"] == 22050 and manifest["config"]["hift"]["samples_per_frame"] == 256
    assert manifest["graphs"]["llm_step.onnx"]["precision"] == "int8-weight-only-block128"
    assert manifest["graphs"]["llm_text_encoder.onnx"]["precision"] == "int8"
    spec = json.loads((out / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
    shipped = whisper.__file__.replace("__init__.py", "assets/multilingual.tiktoken")
    assert spec["sha256"] == sha256_file(out / "tokenizer" / "multilingual.tiktoken") == sha256_file(shipped)
    assert manifest["files"]["tokenizer/multilingual.tiktoken"]["sha256"] == spec["sha256"]
    assert spec["n_vocab"] == 51866 and spec["specials"][:2] == ["<|endoftext|>", "<|startoftranscript|>"]


def test_modes_follow_the_variant(sources, tmp_path):
    base = convert(sources["CosyVoice-300M"], tmp_path / "base", quantize="none")
    assert base["config"]["model"] == {"variant": "base", "name": "CosyVoice-300M",
                                       "modes": ["zero_shot", "cross_lingual"], "variant_detected": True}
    assert "spk2info.npz" not in base["files"]
    forced = convert(sources["CosyVoice-300M-Instruct"], tmp_path / "sft", quantize="none", variant="sft")
    assert forced["config"]["model"]["modes"] == ["sft", "zero_shot", "cross_lingual"]
    assert forced["config"]["model"]["variant_detected"] is False


def test_refusals_name_the_problem(sources, tmp_path):
    v2 = tmp_path / "CosyVoice2-0.5B"
    v2.mkdir()
    (v2 / "cosyvoice2.yaml").write_text("sample_rate: 24000\n", encoding="utf-8")
    with pytest.raises(ModelMissingError, match="convert cosyvoice2"):
        convert(v2, tmp_path / "out", quantize="none")
    with pytest.raises(ModelMissingError, match="spk2info.pt"):
        convert(sources["CosyVoice-300M"], tmp_path / "out", variant="sft")
    broken = shutil.copytree(sources["CosyVoice-300M"], tmp_path / "CosyVoice-300M")
    (broken / "flow.pt").write_bytes(b"")
    with pytest.raises(ModelMissingError, match="flow.pt"):
        convert(broken, tmp_path / "out")
    wrong = shutil.copytree(sources["CosyVoice-300M"], tmp_path / "wrong-sizes")
    (wrong / "cosyvoice.yaml").write_text(reference.yaml_text().replace("num_blocks: 2", "num_blocks: 3"),
                                          encoding="utf-8")
    with pytest.raises(InputError, match="does not match the sizes"):
        convert(wrong, tmp_path / "out", quantize="none")
    assert not (tmp_path / "out").exists()


def test_a_true_size_mismatch_names_both_values(sources, tmp_path):
    """Sizes that upstream lets differ convert (tests/engines/cosyvoice/test_v1_parity.py, "unequal");
    sizes upstream needs equal, or a yaml the checkpoint contradicts, are refused with both numbers."""
    text = reference.yaml_text()
    cases = {
        # the flow encoder reads the token embedding: its input_size must be flow.input_size (44)
        "flow.encoder.input_size is 40 but flow.input_size is 44":
            text.replace("        input_size: 44\n        use_cnn_module", "        input_size: 40\n        use_cnn_module"),
        # the yaml says 50 LLM units, llm.pt's feed-forward has 50: say 51 and the tensor contradicts it
        "llm.llm.linear_units is 51, the checkpoint's llm.encoders.0.feed_forward.w_1.weight dimension 0 is 50":
            text.replace("linear_units: 50", "linear_units: 51"),
        "flow.length_regulator.out_channels is 81 but the mel bins upstream's CFM is written for is 80":
            text.replace("sampling_ratios: [1, 1, 1, 1]", "sampling_ratios: [1, 1, 1, 1]\n        out_channels: 81"),
    }
    for expected, yaml in cases.items():
        wrong = shutil.copytree(sources["CosyVoice-300M"], tmp_path / "src", dirs_exist_ok=True)
        assert yaml != text
        (wrong / "cosyvoice.yaml").write_text(yaml, encoding="utf-8")
        with pytest.raises(InputError) as caught:
            convert(wrong, tmp_path / "out", quantize="none", steps=["llm", "flow"])
        assert expected in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_llm_options_are_honoured_or_refused_before_any_step(tmp_path, capsys):
    """``--llm-bits`` and ``--speech-tokenizer-int8`` act on a v1 model as on CosyVoice2's, and need int8:
    with ``--quantize none`` the command exits 2 and writes nothing (it once ignored them, exit 0)."""
    from cosyedge.cli import main
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from cosyedge.engines.cosyvoice.common.sampling import greedy
    from cosyedge.engines.cosyvoice.v1.llm import SpeechLMv1

    src = reference.write_checkpoint(tmp_path / "CosyVoice-300M", llm=reference.build_llm("blocks"), size="blocks")
    for option in (["--llm-bits", "4"], ["--speech-tokenizer-int8"]):
        out = tmp_path / "refused"
        assert main(["convert", "cosyvoice1", "--src", str(src), "--out", str(out), "--quantize", "none",
                     *option]) == 2
        assert "needs --quantize int8" in capsys.readouterr().err and not out.exists()
    manifest = convert(src, tmp_path / "int4", steps=["llm", "frontend"],
                       options={"llm_bits": 4, "speech_tokenizer_int8": True})
    step = manifest["graphs"]["llm_step.onnx"]
    assert step["precision"] == "int4-weight-only-block32" and step["weights"]["decoder_bits"] == 8
    # widths 48 (a block of 16 fits) and 64 (the feed-forward's second product, K = 64: 32 fits)
    assert step["matmuls"] == {"int4-block16": 2 * 3 + 1, "int4-block32": 2, "int8-block16": 1}  # + the head
    assert manifest["graphs"]["speech_tokenizer_v1.onnx"]["precision"] == "int8"
    default = convert(src, tmp_path / "int8", steps=["llm"])["graphs"]["llm_step.onnx"]
    assert default["matmuls"] == {"int8-block16": 2 * 3 + 2, "int8-block64": 2}
    lm = SpeechLMv1.load(ModelDir.load(tmp_path / "int4"))
    assert len(lm.generate([50260, 1000, 2000], greedy(reference.EOS), max_ratio=4)) >= 6
