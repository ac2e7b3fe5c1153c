"""The converter's edges: yaml dialect, both weight-norm spellings, the shipped estimator, bad input,
and manifest verification at load time."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from cosyedge.errors import InputError, ModelMissingError
from tests.helpers import cosyvoice_reference as ref

ref.install_shim()  # fails with the install command when the reference stack is missing
import torch  # noqa: E402

from cosyedge.export.cosyvoice.common.upstream_config import read_config  # noqa: E402
from cosyedge.export.cosyvoice.v2.convert import convert  # noqa: E402


pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


def test_full_yaml_reads_as_cosyvoice2_sizes(tmp_path):
    from cosyedge.export.cosyvoice.common.flow import flow_config
    from cosyedge.export.cosyvoice.common.flow_nets import FlowConfig
    from cosyedge.export.cosyvoice.common.hift import hift_config
    from cosyedge.export.cosyvoice.common.hift_nets import HiftConfig

    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(ref.yaml_text("full"))
    config = read_config(path)
    assert config["flow"]["decoder"]["estimator"]["static_chunk_size"] == 50   # !ref <a> * <b>
    assert config["flow"]["spk_embed_dim"] == 192                               # !ref <key>
    assert config["flow"]["__class__"] == "cosyvoice.flow.flow.CausalMaskedDiffWithXvec"
    assert config["feat_extractor"]["__name__"] == "matcha.utils.audio.mel_spectrogram"
    assert flow_config(config) == FlowConfig()
    assert hift_config(config) == HiftConfig()
    assert hift_config(config).samples_per_frame == 480


def test_yaml_refs_to_unknown_keys_are_rejected(tmp_path):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text("a: !ref <nope>\n")
    with pytest.raises(InputError):
        read_config(path)


def _hift_dir(tmp_path, legacy: bool):
    hift = ref.build_hift("tiny", seed=3)
    src = ref.write_model_dir(tmp_path / "src", hift=hift, legacy_weight_norm=legacy)
    if legacy:   # released checkpoints may also carry upstream's "generator." prefix
        state = torch.load(src / "hift.pt")
        torch.save({f"generator.{k}": v for k, v in state.items()}, src / "hift.pt")
    return hift, src


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True], ids=["parametrizations", "weight_g_v"])
def test_both_weight_norm_spellings_convert_exactly(tmp_path, legacy):
    from cosyedge.engines.cosyvoice.common.hift import HiftParams, HiftVocoder
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir

    hift, src = _hift_dir(tmp_path, legacy)
    if legacy:
        keys = torch.load(src / "hift.pt").keys()
        assert any(k.endswith(".weight_g") for k in keys)
        assert not any("parametrizations" in k for k in keys)
    convert(src, tmp_path / "out", steps=["hift"])
    model = ModelDir.load(tmp_path / "out", verify_hashes=True)
    cfg = model.config("hift")
    source = np.load(model.file(cfg["source"]))
    vocoder = HiftVocoder(model.session(cfg["f0"]), model.session(cfg["decoder"]), source["weight"],
                          source["bias"], HiftParams.from_dict(cfg))
    mel = torch.randn(1, 80, 12, generator=torch.Generator().manual_seed(0)) - 4
    cache = 0.1 * torch.randn(1, 1, 12 * 480, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        wav_ref, _ = hift.inference(speech_feat=mel, cache_source=cache)
    wav = vocoder.decode(mel[0].numpy(), cache[0, 0].numpy())
    np.testing.assert_allclose(wav, wav_ref[0].numpy(), atol=1e-4, rtol=0)


@pytest.mark.slow
def test_estimator_is_exported_not_shipped_and_wrong_sizes_are_rejected(tmp_path):
    import onnx

    flow = ref.build_flow("tiny", seed=1)
    src = ref.write_model_dir(tmp_path / "src", flow=flow)
    shipped = src / "flow.decoder.estimator.fp32.onnx"
    shipped.write_bytes(b"stand-in for the official estimator graph")
    manifest = convert(src, tmp_path / "out", steps=["flow"])
    info = manifest["files"]["flow_estimator.onnx"]
    assert info["origin"] == "flow.pt"  # our CPU form of the same weights, not upstream's graph
    graph = onnx.load(str(tmp_path / "out" / "flow_estimator.onnx")).graph
    assert [i.name for i in graph.input] == ["x", "mu", "t", "spks", "cond"]
    ops = [n.op_type for n in graph.node]
    assert ops.count("MultiHeadAttention") == 4  # tiny preset: 1 + 2 x 1 + 1 transformer blocks
    assert "Conv" not in ops and "Softmax" not in ops and "Softplus" not in ops

    # A yaml that disagrees with flow.pt must fail loudly, and leave no half-written output.
    (src / "cosyvoice2.yaml").write_text(ref.yaml_text("tiny").replace("linear_units: 64", "linear_units: 96"))
    with pytest.raises(InputError, match="flow.pt does not match"):
        convert(src, tmp_path / "bad", steps=["flow"])
    assert not (tmp_path / "bad").exists()
    assert not list(tmp_path.glob(".bad.partial"))


def test_missing_files_and_bad_arguments(tmp_path):
    with pytest.raises(ModelMissingError):
        convert(tmp_path / "nowhere", tmp_path / "out")
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(ModelMissingError, match="cosyvoice2.yaml"):
        convert(src, tmp_path / "out")
    (src / "cosyvoice2.yaml").write_text(ref.yaml_text("tiny"))
    with pytest.raises(ModelMissingError, match="hift.pt"):
        convert(src, tmp_path / "out", steps=["hift"])
    with pytest.raises(InputError, match="unknown export step"):
        convert(src, tmp_path / "out", steps=["vocoder"])
    with pytest.raises(InputError, match="--quantize"):
        convert(src, tmp_path / "out", quantize="int4")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="--force"):
        convert(src, tmp_path / "full")


@pytest.mark.slow
def test_model_dir_detects_missing_and_altered_files(tmp_path):
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir

    _, src = _hift_dir(tmp_path, legacy=False)
    out = tmp_path / "out"
    convert(src, out, steps=["hift"])
    ModelDir.load(out, verify_hashes=True)

    altered = tmp_path / "altered"
    shutil.copytree(out, altered)
    data = bytearray((altered / "hift_f0.onnx").read_bytes())
    data[-1] ^= 0xFF
    (altered / "hift_f0.onnx").write_bytes(bytes(data))
    ModelDir.load(altered)  # same size: only the hash check can see it
    with pytest.raises(ModelMissingError, match="sha256"):
        ModelDir.load(altered, verify_hashes=True)

    (altered / "hift_source.npz").unlink()
    with pytest.raises(ModelMissingError, match="hift_source.npz"):
        ModelDir.load(altered)

    manifest = json.loads((out / "manifest.json").read_text())
    manifest["format_version"] = 99
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelMissingError, match="format version"):
        ModelDir.load(out)


def test_convert_is_a_cli_command():
    from cosyedge.cli import COMMAND_MODULES
    assert "cosyedge.commands.convert" in COMMAND_MODULES


# --- what a teacher copying the checkpoint by hand gets wrong ----------------------------------


def test_every_missing_or_empty_source_file_is_named_before_any_step_runs(tmp_path):
    src = tmp_path / "CosyVoice2-0.5B"
    src.mkdir()
    (src / "cosyvoice2.yaml").write_text(ref.yaml_text("tiny"))
    (src / "hift.pt").write_bytes(b"")  # an interrupted download leaves empty files
    with pytest.raises(ModelMissingError) as err:
        convert(src, tmp_path / "out")
    for name in ("flow.pt", "hift.pt", "llm.pt", "CosyVoice-BlankEN/config.json", "campplus.onnx",
                 "speech_tokenizer_v2.onnx"):
        assert name in str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial"))


@pytest.mark.parametrize("layout", ["parent", "huggingface_cache"])
def test_src_above_the_checkpoint_names_where_it_is(tmp_path, layout):
    top = tmp_path / ("downloads" if layout == "parent" else "models--FunAudioLLM--CosyVoice2-0.5B")
    inner = top / ("CosyVoice2-0.5B" if layout == "parent" else "snapshots/0123abcd")
    inner.mkdir(parents=True)
    (inner / "cosyvoice2.yaml").write_text(ref.yaml_text("tiny"))
    with pytest.raises(ModelMissingError, match=f"pass --src {inner}$"):
        convert(top, tmp_path / "out")


def test_truncated_checkpoint_files_are_named(tmp_path):
    src = ref.write_model_dir(tmp_path / "src", hift=ref.build_hift("tiny"))
    data = (src / "hift.pt").read_bytes()
    (src / "hift.pt").write_bytes(data[: len(data) // 2])   # a copy cut short
    with pytest.raises(ModelMissingError, match=r"hift\.pt cannot be read .*truncated or damaged"):
        convert(src, tmp_path / "out", steps=["hift"])
    (src / "flow.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelMissingError, match=r"flow\.pt cannot be read"):
        convert(src, tmp_path / "out", steps=["flow"])
    assert not (tmp_path / "out").exists()


def test_truncated_frontend_graph_is_refused_not_copied(tmp_path):
    from tests.helpers.cosyvoice_tiny import campplus_standin, speech_tokenizer_standin
    from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

    src = tmp_path / "src"
    (src / "CosyVoice-BlankEN").mkdir(parents=True)
    (src / "cosyvoice2.yaml").write_text(ref.yaml_text("tiny"))
    write_tiny_tokenizer(src / "CosyVoice-BlankEN")
    campplus_standin(src / "campplus.onnx")
    speech_tokenizer_standin(src / "speech_tokenizer_v2.onnx")
    data = (src / "campplus.onnx").read_bytes()
    (src / "campplus.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelMissingError, match=r"campplus\.onnx cannot be read"):
        convert(src, tmp_path / "out", steps=["frontend"])
    assert not (tmp_path / "out").exists()


def test_out_that_would_delete_the_source_or_other_models_is_refused(tmp_path):
    src = ref.write_model_dir(tmp_path / "usb" / "CosyVoice2-0.5B", hift=ref.build_hift("tiny"))
    (tmp_path / "models" / "kokoro-int8").mkdir(parents=True)
    (tmp_path / "models" / "kokoro-int8" / "manifest.json").write_text("{}")
    for out, why in ((src, "holds the checkpoint"), (src.parent, "holds the checkpoint"),
                     (tmp_path / "models", r"holds other models \(kokoro-int8\)")):
        with pytest.raises(InputError, match=why):
            convert(src, out, steps=["hift"], force=True)
    assert (src / "hift.pt").is_file() and (tmp_path / "models" / "kokoro-int8" / "manifest.json").is_file()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        convert(src, tmp_path / "afile", steps=["hift"])
    with pytest.raises(InputError, match="cannot write"):   # --out below a file: not writable
        convert(src, tmp_path / "afile" / "m", steps=["hift"])
