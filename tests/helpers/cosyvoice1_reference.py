"""Test-only: the upstream CosyVoice-300M (v1) modules, shrunken or full size, and the official layout.

* :func:`build_llm` / :func:`build_flow` / :func:`build_hift` - upstream ``TransformerLM``,
  ``MaskedDiffWithXvec`` (+ ``ConditionalCFM``, ``InterpolateRegulator``) and the 22.05 kHz
  ``HiFTGenerator`` with random weights from a size preset, ``.eval()`` called. ``"tiny"`` uses
  deliberately odd widths (3 heads of 14, 4 of 11, ...) so that a transposed or mis-split weight
  cannot pass the parity tests by symmetry.
* :func:`write_checkpoint` - ``cosyvoice.yaml`` + ``llm.pt`` + ``flow.pt`` + ``hift.pt`` (+ stand-ins
  for the two frontend ONNX files and, for SFT/Instruct, ``spk2info.pt``) in the official layout.

Reference: PyPI ``cosyvoice-minicpmo`` (model code = FunAudioLLM/CosyVoice @46dfe04), imported through
the shim of :mod:`tests.helpers.cosyvoice_reference`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from tests.helpers import upstream_yaml
from tests.helpers.cosyvoice_reference import _cfm_params, _randomize_norms, install_shim
from tests.helpers.cosyvoice_reference import build_hift as build_hift_v2

#: "full" repeats upstream examples/libritts/cosyvoice/conf/cosyvoice.yaml @46dfe04.
PRESETS: dict[str, dict[str, Any]] = {
    "full": {
        "llm": {"text_input": 512, "text_hidden": 1024, "text_heads": 16, "text_units": 4096, "text_blocks": 6,
                "hidden": 1024, "heads": 16, "units": 4096, "blocks": 14},
        "flow": {"input_size": 512, "heads": 8, "units": 2048, "blocks": 6},
        "estimator": {"channels": [256, 256], "attention_head_dim": 64, "n_blocks": 4, "num_mid_blocks": 12,
                      "num_heads": 8},
        "hift": {"base_channels": 512, "cond_channels": 512},
    },
    "tiny": {
        "llm": {"text_input": 36, "text_hidden": 30, "text_heads": 3, "text_units": 38, "text_blocks": 2,
                "hidden": 42, "heads": 3, "units": 50, "blocks": 2},
        "flow": {"input_size": 44, "heads": 4, "units": 52, "blocks": 2},
        "estimator": {"channels": [24, 24], "attention_head_dim": 10, "n_blocks": 1, "num_mid_blocks": 2,
                      "num_heads": 2},
        "hift": {"base_channels": 24, "cond_channels": 20},
    },
}
#: "unequal": "tiny" with every pair of sizes that upstream lets differ made different: the LLM's
#: inputs (``llm_input_size``) narrower than its layers, the flow encoder's layers narrower than the
#: token embedding that feeds them.
PRESETS["unequal"] = {**PRESETS["tiny"], "llm": {**PRESETS["tiny"]["llm"], "input": 40},
                      "flow": {**PRESETS["tiny"]["flow"], "encoder_size": 36}}
#: "blocks": "tiny" with the LLM's widths multiples of 16, so that its step graph stores every product
#: as MatMulNBits (block 16) at 8 and at 4 bits (the odd "tiny" widths fall back to float products).
PRESETS["blocks"] = {**PRESETS["tiny"], "llm": {**PRESETS["tiny"]["llm"], "hidden": 48, "units": 64}}
TEXT_VOCAB = 51866
SPEECH_VOCAB = 4096
EOS = SPEECH_VOCAB
#: The seven speakers of the official CosyVoice-300M-SFT ``spk2info.pt`` (what upstream's web UI lists
#: when that model is loaded; the repository itself names 中文女 and 中文男 in README.md @46dfe04 and
#: uses 中文女 as the runtime clients' default); the tiny checkpoints ship these names.
SFT_SPEAKERS = ("中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女")


def build_llm(size: str = "tiny", seed: int = 0, eos_bias: float = 0.0):
    """Upstream ``TransformerLM`` (ConformerEncoder text encoder, TransformerEncoder LLM), random weights."""
    install_shim()
    import torch
    from cosyvoice.llm.llm import TransformerLM
    from cosyvoice.transformer.encoder import ConformerEncoder, TransformerEncoder
    from cosyvoice.utils.common import ras_sampling

    p = PRESETS[size]["llm"]
    torch.manual_seed(seed)
    text_encoder = ConformerEncoder(
        input_size=p["text_input"], output_size=p["text_hidden"], attention_heads=p["text_heads"],
        linear_units=p["text_units"], num_blocks=p["text_blocks"], dropout_rate=0.1, positional_dropout_rate=0.1,
        attention_dropout_rate=0.0, normalize_before=True, input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
        selfattention_layer_type="rel_selfattn", use_cnn_module=False, macaron_style=False,
        use_dynamic_chunk=False, use_dynamic_left_chunk=False, static_chunk_size=1)
    llm = TransformerEncoder(
        input_size=p.get("input", p["hidden"]), output_size=p["hidden"], attention_heads=p["heads"], linear_units=p["units"],
        num_blocks=p["blocks"], dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.0,
        input_layer="linear_legacy", pos_enc_layer_type="rel_pos_espnet", selfattention_layer_type="rel_selfattn",
        static_chunk_size=1)
    model = TransformerLM(
        text_encoder_input_size=p["text_input"], llm_input_size=p.get("input", p["hidden"]), llm_output_size=p["hidden"],
        text_token_size=TEXT_VOCAB, speech_token_size=SPEECH_VOCAB, length_normalized_loss=True, lsm_weight=0,
        spk_embed_dim=192, text_encoder=text_encoder, llm=llm,
        sampling=functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1))
    _randomize_norms(model, seed)
    if eos_bias:
        with torch.no_grad():
            model.llm_decoder.bias[EOS] += eos_bias
    return model.eval()


def build_flow(size: str = "tiny", seed: int = 0):
    """Upstream ``MaskedDiffWithXvec`` (non-causal ConformerEncoder, InterpolateRegulator, ConditionalCFM)."""
    install_shim()
    import torch
    from cosyvoice.flow.decoder import ConditionalDecoder
    from cosyvoice.flow.flow import MaskedDiffWithXvec
    from cosyvoice.flow.flow_matching import ConditionalCFM
    from cosyvoice.flow.length_regulator import InterpolateRegulator
    from cosyvoice.transformer.encoder import ConformerEncoder

    p, e = PRESETS[size]["flow"], PRESETS[size]["estimator"]
    torch.manual_seed(seed)
    encoder = ConformerEncoder(
        input_size=p["input_size"], output_size=p.get("encoder_size", p["input_size"]), attention_heads=p["heads"], linear_units=p["units"],
        num_blocks=p["blocks"], dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.1,
        normalize_before=True, input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
        selfattention_layer_type="rel_selfattn", use_cnn_module=False, macaron_style=False)
    regulator = InterpolateRegulator(channels=80, sampling_ratios=[1, 1, 1, 1])
    estimator = ConditionalDecoder(in_channels=320, out_channels=80, dropout=0.0, act_fn="gelu", **e)
    cfm = ConditionalCFM(in_channels=240, cfm_params=_cfm_params(), n_spks=1, spk_emb_dim=80, estimator=estimator)
    flow = MaskedDiffWithXvec(input_size=p["input_size"], output_size=80, spk_embed_dim=192, output_type="mel",
                              vocab_size=SPEECH_VOCAB, input_frame_rate=50, only_mask_loss=True, encoder=encoder,
                              length_regulator=regulator, decoder=cfm)
    _randomize_norms(flow, seed)
    gen = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():  # GroupNorms start at 1/0 too
        for sub in flow.modules():
            if isinstance(sub, torch.nn.GroupNorm):
                sub.weight.add_(0.1 * torch.randn(sub.weight.shape, generator=gen))
                sub.bias.add_(0.1 * torch.randn(sub.bias.shape, generator=gen))
    return flow.eval()


def build_hift(size: str = "tiny", seed: int = 0, f0_bias: float = 150.0):
    """Upstream 22.05 kHz ``HiFTGenerator`` (``SineGen`` source, 256 samples per frame), random weights:
    CosyVoice2's builder with v1's sizes and rates."""
    return build_hift_v2(size, seed, f0_bias, sizes=PRESETS[size]["hift"], sampling_rate=22050,
                         upsample_rates=(8, 8), upsample_kernels=(16, 16), source_kernels=(7, 11))


def yaml_text(size: str = "tiny") -> str:
    """A ``cosyvoice.yaml`` in upstream's layout (the sections the converter reads) with the preset's sizes."""
    llm, flow, est, hift = (PRESETS[size][part] for part in ("llm", "flow", "estimator", "hift"))
    hift_section = upstream_yaml.hift("HiFTGenerator", hift["base_channels"], hift["cond_channels"],
                                      "ConvRNNF0Predictor", upsample_rates="[8, 8]", upsample_kernels="[16, 16]",
                                      source_kernels="[7, 11]", source_dilations="[[1, 3, 5], [1, 3, 5]]")
    return f"""\
# CosyVoice-300M test config in the upstream hyperpyyaml layout (sizes from a preset).
__set_seed1: !apply:random.seed [1986]
sample_rate: 22050
text_encoder_input_size: {llm["text_input"]}
llm_input_size: {llm.get("input", llm["hidden"])}
llm_output_size: {llm["hidden"]}
spk_embed_dim: 192

llm: !new:cosyvoice.llm.llm.TransformerLM
    text_encoder_input_size: !ref <text_encoder_input_size>
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    text_token_size: 51866
    speech_token_size: 4096
    length_normalized_loss: True
    lsm_weight: 0
    spk_embed_dim: !ref <spk_embed_dim>
    text_encoder: !new:cosyvoice.transformer.encoder.ConformerEncoder
        input_size: !ref <text_encoder_input_size>
        output_size: {llm["text_hidden"]}
        attention_heads: {llm["text_heads"]}
        linear_units: {llm["text_units"]}
        num_blocks: {llm["text_blocks"]}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        use_cnn_module: False
        macaron_style: False
        use_dynamic_chunk: False
        use_dynamic_left_chunk: False
        static_chunk_size: 1
    llm: !new:cosyvoice.transformer.encoder.TransformerEncoder
        input_size: !ref <llm_input_size>
        output_size: !ref <llm_output_size>
        attention_heads: {llm["heads"]}
        linear_units: {llm["units"]}
        num_blocks: {llm["blocks"]}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        input_layer: 'linear_legacy'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        static_chunk_size: 1
{upstream_yaml.RAS_SAMPLING}
flow: !new:cosyvoice.flow.flow.MaskedDiffWithXvec
    input_size: {flow["input_size"]}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 4096
    input_frame_rate: 50
    only_mask_loss: True
{upstream_yaml.conformer_encoder("encoder.ConformerEncoder", flow.get("encoder_size", flow["input_size"]),
                                 flow["heads"], flow["units"], flow["blocks"], input_size=flow["input_size"])}\
    length_regulator: !new:cosyvoice.flow.length_regulator.InterpolateRegulator
        channels: 80
        sampling_ratios: [1, 1, 1, 1]
{upstream_yaml.cfm_decoder("ConditionalCFM")}\
{upstream_yaml.unet_estimator("ConditionalDecoder", est)}\

{hift_section}
get_tokenizer: !name:whisper.tokenizer.get_tokenizer
    multilingual: True
    num_languages: 100
    language: 'en'
    task: 'transcribe'
allowed_special: 'all'

{upstream_yaml.feat_extractor(1024, 256, "8000")}"""


def write_checkpoint(directory: Path, llm=None, flow=None, hift=None, size: str = "tiny",
                     speakers: tuple[str, ...] = (), legacy_weight_norm: bool = True) -> Path:
    """Save modules (built when not given) in the official layout; ``speakers`` writes ``spk2info.pt``.

    ``hift.pt`` uses the old ``weight_g``/``weight_v`` spelling by default, as the released file does.
    """
    import torch

    from tests.helpers.cosyvoice_reference import to_legacy_weight_norm
    from tests.helpers.cosyvoice_tiny import campplus_standin, speech_tokenizer_standin

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cosyvoice.yaml").write_text(yaml_text(size), encoding="utf-8")
    llm = llm if llm is not None else build_llm(size)
    flow = flow if flow is not None else build_flow(size)
    hift = hift if hift is not None else build_hift(size)
    torch.save(llm.state_dict(), directory / "llm.pt")
    torch.save(flow.state_dict(), directory / "flow.pt")
    state = hift.state_dict()
    torch.save(to_legacy_weight_norm(state) if legacy_weight_norm else state, directory / "hift.pt")
    campplus_standin(directory / "campplus.onnx")
    speech_tokenizer_standin(directory / "speech_tokenizer_v1.onnx", vocab=SPEECH_VOCAB, stride=2)
    if speakers:
        gen = torch.Generator().manual_seed(3)
        torch.save({name: {"embedding": torch.randn(1, 192, generator=gen)} for name in speakers},
                   directory / "spk2info.pt")
    return directory
