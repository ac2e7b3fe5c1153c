"""Convert an official CosyVoice-300M, -300M-SFT or -300M-Instruct directory into a cosyedge model directory.

Input (as downloaded): ``cosyvoice.yaml``, ``llm.pt``, ``flow.pt``, ``hift.pt``, ``campplus.onnx``,
``speech_tokenizer_v1.onnx`` and, for SFT/Instruct, ``spk2info.pt``. The text tokenizer is not in the
directory: upstream's yaml asks for whisper's multilingual tiktoken vocabulary, which the converter
copies from the ``openai-whisper`` package (export time only) with its sha256.

The variant is detected from the directory (:func:`detect_variant`: upstream's own rule, ``-Instruct``
in the directory name, then whether it ships preset speakers) and stated in the manifest; it decides
which modes the engine offers. The orchestration is the shared frame's (:mod:`cosyedge.export.cosyvoice.common.pipeline`:
context, temporary directory, manifest); the HiFT and compact steps and the int8 plan are shared; the v1 parts
(LLM, non-causal flow with its length regulator, tokenizer) are the steps of this module.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import InputError, ModelMissingError
from cosyedge.export import read_source
from cosyedge.export.cosyvoice.common.pipeline import (ExportContext, ModelSpec, build_manifest, check_arguments,
                                                       check_out, chosen_steps, compact_step, export_into, hift_step)

logger = logging.getLogger(__name__)

FAMILY, VERSION = "cosyvoice", 1
CONFIG_NAME = "cosyvoice.yaml"
VARIANTS = ("base", "sft", "instruct")
#: What each variant is called upstream (Hugging Face / ModelScope names).
VARIANT_NAMES = {"base": "CosyVoice-300M", "sft": "CosyVoice-300M-SFT", "instruct": "CosyVoice-300M-Instruct"}
#: The manifest's ``licence`` (docs/models.md), as the CosyVoice2 converter writes it; the model card is
#: the authority for the weights. The text tokenizer file comes from the openai-whisper package.
LICENCE = {"weights": "Apache-2.0 (FunAudioLLM/CosyVoice-300M family; see its model card)",
           "code": "Apache-2.0 (FunAudioLLM/CosyVoice)",
           "tokenizer": "MIT (openai/whisper multilingual.tiktoken)"}

TEXT_ENCODER_FILE = "llm_text_encoder.onnx"
LM_FILE = "llm_step.onnx"  # + llm_step.onnx.data
FLOW_ENCODER_FILE = "flow_encoder.onnx"
REGULATOR_FILE = "flow_regulator.onnx"
ESTIMATOR_FILE = "flow_estimator.onnx"
TOKENIZER_DIR = "tokenizer"
TIKTOKEN_FILE = "multilingual.tiktoken"
SPEECH_TOKENIZER = "speech_tokenizer_v1.onnx"
OPSET = 17

STEP_SOURCES: dict[str, tuple[str, ...]] = {
    "llm": ("llm.pt",), "flow": ("flow.pt",), "hift": ("hift.pt",),
    "frontend": ("campplus.onnx", SPEECH_TOKENIZER),
}


def detect_variant(src: Path) -> str:
    """``instruct`` when the directory name says ``-Instruct`` (upstream ``CosyVoice.__init__`` decides
    instruct support the same way), else ``sft`` when it ships ``spk2info.pt``, else ``base``."""
    if "-instruct" in Path(src).resolve().name.lower():
        return "instruct"
    return "sft" if (Path(src) / "spk2info.pt").is_file() else "base"


def modes_of(variant: str, has_presets: bool) -> list[str]:
    """The modes a variant offers (upstream ``cli/cosyvoice.py`` @46dfe04: ``inference_sft`` needs a
    speaker of ``spk2info``, ``inference_instruct`` needs an ``-Instruct`` model, zero-shot and
    cross-lingual cloning work on every model)."""
    modes = ["zero_shot", "cross_lingual"]
    if has_presets:
        modes.insert(0, "sft")
    if variant == "instruct" and has_presets:
        modes.append("instruct")
    return modes


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------

#: The mel bins upstream's v1 CFM hard-codes (``ConditionalCFM.forward_estimator``'s 80-channel buffers).
MEL_BINS = 80


def _same(what: str, value: int, other_what: str, other: int) -> None:
    """Refuse two sizes that upstream's classes need equal, naming both (a checkpoint upstream cannot run)."""
    if value != other:
        raise InputError(f"{CONFIG_NAME}: {what} is {value} but {other_what} is {other}; upstream's classes "
                         "need them equal, so this checkpoint cannot run as written")


class _Sizes:
    """One yaml section's sizes, each checked against the checkpoint's tensors where they show it.

    A size comes from the yaml when it is written there (else upstream's default for the class); when
    the state dict shows it too (a tensor's dimension, or how many layers there are) the two must
    agree, and a disagreement names both values. Without a state dict (``None``) only the yaml counts.
    """

    def __init__(self, part: dict[str, Any], where: str, state: dict | None, source: str) -> None:
        self.part, self.where, self.state, self.source = part, where, state, source

    def get(self, key: str, default: int, tensor: str | None = None, axis: int = 0) -> int:
        """``key`` of the section; ``tensor`` (a state-dict key) and ``axis`` show the same size,
        ``axis=None`` the count of numbered layers under ``tensor`` (a prefix ending in ``.``)."""
        value = int(self.part.get(key, default))
        if self.state is None or tensor is None:
            return value
        if axis is None:
            found = {k[len(tensor):].split(".", 1)[0] for k in self.state if k.startswith(tensor)}
            shown, what = len({n for n in found if n.isdigit()}), f"layers under {tensor}*"
        elif tensor in self.state:
            shown, what = int(self.state[tensor].shape[axis]), f"{tensor} dimension {axis}"
        else:
            return value  # a missing tensor: the strict load names it
        if shown != value:
            written = "" if key in self.part else " (upstream's default: not written there)"
            raise InputError(f"{self.source} does not match the sizes in {CONFIG_NAME}: {self.where}.{key} is "
                             f"{value}{written}, the checkpoint's {what} is {shown}")
        return value


def lm_config(config: dict[str, Any], state: dict | None = None):
    """The LLM's sizes from the yaml's ``llm`` section, each read on its own (none assumed equal) and
    checked against ``llm.pt``'s tensors when ``state`` is given."""
    from cosyedge.export.cosyvoice.v1.nets import LMConfig
    from cosyedge.export.cosyvoice.common.upstream_config import section

    llm = section(config, "llm")
    if not str(llm.get("__class__", "")).endswith("TransformerLM"):
        raise InputError(f"llm class {llm.get('__class__')!r} is not CosyVoice-300M's TransformerLM")
    text, lm = section(config, "llm", "text_encoder"), section(config, "llm", "llm")
    for name, part in (("text_encoder", text), ("llm", lm)):
        if part.get("pos_enc_layer_type", "rel_pos_espnet") != "rel_pos_espnet" or \
                part.get("selfattention_layer_type", "rel_selfattn") != "rel_selfattn":
            raise InputError(f"llm.{name}: only relative positions (rel_pos_espnet) are supported")
        if part.get("use_cnn_module") or part.get("macaron_style"):
            raise InputError(f"llm.{name}: conv module / macaron FFN are not CosyVoice-300M's; unsupported")
    top = _Sizes(llm, "llm", state, "llm.pt")
    te, tr = _Sizes(text, "llm.text_encoder", state, "llm.pt"), _Sizes(lm, "llm.llm", state, "llm.pt")
    text_input = top.get("text_encoder_input_size", 512, "text_embedding.weight", 1)
    input_size = top.get("llm_input_size", 1024, "llm_embedding.weight", 1)
    hidden = tr.get("output_size", 256, "llm.after_norm.weight")
    # TransformerLM builds its embeddings and head from its own arguments and the encoders from
    # theirs: where one feeds the other, upstream needs the two numbers equal.
    _same("llm.text_encoder.input_size", te.get("input_size", text_input),
          "llm.text_encoder_input_size (the text embedding's width)", text_input)
    _same("llm.llm.input_size", tr.get("input_size", input_size), "llm.llm_input_size", input_size)
    _same("llm.llm_output_size (the decoder head's input)", top.get("llm_output_size", hidden, "llm_decoder.weight", 1),
          "llm.llm.output_size", hidden)
    return LMConfig(
        text_vocab=top.get("text_token_size", 51866, "text_embedding.weight"), text_input=text_input,
        text_hidden=te.get("output_size", 256, "text_encoder.after_norm.weight"),
        text_heads=te.get("attention_heads", 4, "text_encoder.encoders.0.self_attn.pos_bias_u"),
        text_units=te.get("linear_units", 2048, "text_encoder.encoders.0.feed_forward.w_1.weight"),
        text_blocks=te.get("num_blocks", 6, "text_encoder.encoders.", None),
        input_size=input_size, hidden=hidden, heads=tr.get("attention_heads", 4, "llm.encoders.0.self_attn.pos_bias_u"),
        units=tr.get("linear_units", 2048, "llm.encoders.0.feed_forward.w_1.weight"),
        blocks=tr.get("num_blocks", 6, "llm.encoders.", None),
        speech_vocab=top.get("speech_token_size", 4096, "speech_embedding.weight"),
        spk_embed_dim=top.get("spk_embed_dim", 192, "spk_embed_affine_layer.weight", 1))


def flow_config(config: dict[str, Any], state: dict | None = None):
    """The flow's sizes from the yaml's ``flow`` section, each read on its own (none assumed equal) and
    checked against ``flow.pt``'s tensors when ``state`` is given."""
    from cosyedge.export.cosyvoice.v1.nets import FlowConfigV1
    from cosyedge.export.cosyvoice.common.upstream_config import section

    flow = section(config, "flow")
    if not str(flow.get("__class__", "")).endswith(".MaskedDiffWithXvec"):
        raise InputError(f"flow class {flow.get('__class__')!r} is not CosyVoice-300M's MaskedDiffWithXvec")
    enc = section(config, "flow", "encoder")
    reg = section(config, "flow", "length_regulator")
    est = section(config, "flow", "decoder", "estimator")
    if enc.get("use_cnn_module") or enc.get("macaron_style"):
        raise InputError("flow encoder with conv module or macaron FFN is not CosyVoice-300M's; unsupported")
    if str(est.get("act_fn", "snake")) != "gelu":
        raise InputError(f"flow.decoder.estimator.act_fn is {est.get('act_fn', 'snake (the default)')!r}; "
                         "CosyVoice-300M's is 'gelu', the only one supported")
    top, en = _Sizes(flow, "flow", state, "flow.pt"), _Sizes(enc, "flow.encoder", state, "flow.pt")
    rg, es = _Sizes(reg, "flow.length_regulator", state, "flow.pt"), _Sizes(est, "flow.decoder.estimator", state, "flow.pt")
    input_size = top.get("input_size", 512, "input_embedding.weight", 1)
    output_size = top.get("output_size", MEL_BINS, "encoder_proj.weight")
    # MaskedDiffWithXvec embeds the tokens at its input_size and projects from encoder.output_size():
    # the encoder's own input_size must be the first; its output_size is its own.
    _same("flow.encoder.input_size", en.get("input_size", input_size), "flow.input_size", input_size)
    _same("flow.output_size", output_size, "the mel bins upstream's CFM is written for", MEL_BINS)
    channels = rg.get("channels", output_size, "length_regulator.model.0.weight", 1)
    _same("flow.length_regulator.channels", channels, "flow.output_size", output_size)
    _same("flow.length_regulator.out_channels", int(reg.get("out_channels") or channels),
          "the mel bins upstream's CFM is written for", MEL_BINS)
    _same("flow.decoder.estimator.in_channels", es.get("in_channels", 4 * MEL_BINS),
          "4 x the mel bins (noise, mu, speaker, prompt)", 4 * MEL_BINS)
    _same("flow.decoder.estimator.out_channels", es.get("out_channels", MEL_BINS, "decoder.estimator.final_proj.weight"),
          "the mel bins", MEL_BINS)
    return FlowConfigV1(
        vocab_size=top.get("vocab_size", 4096, "input_embedding.weight"), input_size=input_size,
        encoder_size=en.get("output_size", 256, "encoder.after_norm.weight"), output_size=output_size,
        spk_embed_dim=top.get("spk_embed_dim", 192, "spk_embed_affine_layer.weight", 1),
        input_frame_rate=top.get("input_frame_rate", 50),
        attention_heads=en.get("attention_heads", 4, "encoder.encoders.0.self_attn.pos_bias_u"),
        linear_units=en.get("linear_units", 2048, "encoder.encoders.0.feed_forward.w_1.weight"),
        num_blocks=en.get("num_blocks", 6, "encoder.encoders.", None),
        regulator_stages=len(reg.get("sampling_ratios", [1, 1, 1, 1])), regulator_groups=rg.get("groups", 1),
        est_in_channels=es.get("in_channels", 4 * MEL_BINS), est_out_channels=es.get("out_channels", MEL_BINS),
        est_channels=tuple(int(c) for c in est.get("channels", [256, 256])),
        est_attention_head_dim=es.get("attention_head_dim", 64), est_n_blocks=es.get("n_blocks", 1),
        est_num_mid_blocks=es.get("num_mid_blocks", 2), est_num_heads=es.get("num_heads", 4))


# ----------------------------------------------------------------------------------------------
# Steps
# ----------------------------------------------------------------------------------------------

def _load_state(path: Path) -> dict:
    import torch

    state = read_source(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    return state


def _strict(module, state: dict, what: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"{what} does not match the sizes in {CONFIG_NAME}: {exc}") from exc


def _store_table(ctx: ExportContext, name: str, table: np.ndarray, role: str) -> dict[str, str]:
    """Save an embedding table (int8 + per-row scale with ``--quantize int8``); return its file names."""
    from cosyedge.export.cosyvoice.common.llm import quantize_text_embedding

    files = {}
    if ctx.quantize == "int8":
        codes, scale = quantize_text_embedding(table)
        np.save(ctx.add_file(f"llm_{name}.npy", role), codes)
        np.save(ctx.add_file(f"llm_{name}_scale.npy", role + " (per-row scale)"), scale)
        files[name], files[name + "_scale"] = f"llm_{name}.npy", f"llm_{name}_scale.npy"
    else:
        np.save(ctx.add_file(f"llm_{name}.npy", role), table.astype(np.float32))
        files[name] = f"llm_{name}.npy"
    return files


def export_lm(ctx: ExportContext) -> None:
    """Step "llm": ``llm.pt`` -> text-encoder graph, step graph with KV cache, host-side tables."""
    import torch

    from cosyedge.export.cosyvoice.common.flow import quiet_export
    from cosyedge.export.cosyvoice.common.llm import plan_for
    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place
    from cosyedge.export.cosyvoice.v1.nets import TextEncoder, positional_weights
    from cosyedge.export.cosyvoice.v1.step_graph import STEP_FORMAT, cache_head_dim, check_step_state

    state = _load_state(ctx.source_file("llm.pt"))
    cfg = lm_config(ctx.config, state)
    plan = plan_for(ctx.quantize, ctx.options.get("llm_bits"))
    text = {k: v for k, v in state.items() if k.startswith(("text_encoder.", "text_encoder_affine_layer."))}
    step = {k: v.detach().float().numpy() for k, v in state.items() if k.startswith(("llm.", "llm_decoder."))}
    tables = {"text_embedding.weight", "speech_embedding.weight", "llm_embedding.weight",
              "spk_embed_affine_layer.weight", "spk_embed_affine_layer.bias"}
    stray = sorted(set(state) - set(text) - set(step) - tables)
    missing = sorted(tables - set(state))
    if stray or missing:
        raise InputError(f"llm.pt is not a CosyVoice-300M TransformerLM (unexpected {stray[:3]}, missing {missing[:3]})")
    encoder = TextEncoder(cfg).eval()
    _strict(encoder, text, "llm.pt (text encoder)")
    problem = check_step_state(step, cfg)
    if problem:
        raise InputError(f"llm.pt (LLM) does not match the sizes in {CONFIG_NAME}: {problem}")

    with torch.no_grad(), quiet_export():
        torch.onnx.export(encoder, (torch.randn(1, 7, cfg.text_input),), str(ctx.add_file(TEXT_ENCODER_FILE,
                          "llm text encoder (causal Conformer + affine)")),
                          input_names=["embeds"], output_names=["encoded"],
                          dynamic_axes={"embeds": {1: "n"}, "encoded": {1: "n"}}, opset_version=OPSET, dynamo=False)
    pos = positional_weights(state, cfg).float().numpy()
    export_step_graph(ctx, step, cfg, plan, pos)
    files = {"text_encoder": TEXT_ENCODER_FILE, "step": LM_FILE}
    f32 = {k: v.detach().float().numpy() for k, v in state.items() if k in tables}
    files.update(_store_table(ctx, "text_embedding", f32["text_embedding.weight"], "llm.text_embedding"))
    files.update(_store_table(ctx, "speech_embedding", f32["speech_embedding.weight"], "llm.speech_embedding"))
    np.save(ctx.add_file("llm_special_embedding.npy", "llm.special_embedding (sos, task id)"),
            f32["llm_embedding.weight"])
    np.savez(ctx.add_file("llm_speaker_affine.npz", "llm.speaker_affine"),
             weight=f32["spk_embed_affine_layer.weight"], bias=f32["spk_embed_affine_layer.bias"])
    np.save(ctx.add_file("llm_pos_weight.npy", "llm.positional projections (linear_pos per layer)"),
            pos.astype(np.float16 if ctx.quantize == "int8" else np.float32))
    files.update({"special_embedding": "llm_special_embedding.npy", "speaker_affine": "llm_speaker_affine.npz",
                  "pos_weight": "llm_pos_weight.npy"})
    if ctx.quantize == "int8":
        quantize_in_place(ctx, TEXT_ENCODER_FILE)
    ctx.runtime["llm"] = {"files": files, "step_format": STEP_FORMAT, "hidden": cfg.hidden,
                          "input_size": cfg.input_size, "heads": cfg.heads, "head_dim": cfg.head_dim,
                          "cache_head_dim": cache_head_dim(cfg.head_dim), "layers": cfg.blocks, "text_input": cfg.text_input, "speech_vocab": cfg.speech_vocab,
                          "eos": cfg.speech_vocab, "text_vocab": cfg.text_vocab}


def export_step_graph(ctx: ExportContext, step: dict[str, np.ndarray], cfg, plan, pos: np.ndarray) -> None:
    """Write the LLM step graph (:mod:`~cosyedge.export.cosyvoice.v1.step_graph`) with its weights in
    ``llm_step.onnx.data`` (onnxruntime maps them and drops them once ``MatMulNBits`` has packed
    them); with a quantized plan, record the log-prob SNR against the float32 graph."""
    import onnx

    from cosyedge.export.cosyvoice.common.llm import FP32, move_weights_to_external_data
    from cosyedge.export.cosyvoice.v1.step_graph import build_step_model, step_snr

    path = ctx.add_file(LM_FILE, "llm step (KV cache written in place)")
    onnx.save_model(build_step_model(step, cfg, plan), str(path))
    ctx.add_file(move_weights_to_external_data(path).name, "llm step weights")
    record = {"precision": plan.label, "ops": ["MatMulNBits"] if plan.bits else ["MatMul"],
              "weights": {"bits": plan.bits, "block": plan.block, "decoder_bits": plan.decoder_bits},
              "matmuls": matmul_kinds(path)}
    if plan.bits:
        reference = ctx.out / "llm_step.fp32.onnx"
        onnx.save_model(build_step_model(step, cfg, FP32), str(reference), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=reference.name + ".data", size_threshold=1024)
        try:
            record["snr_db_vs_fp32"] = {"logp": step_snr(reference, path, cfg, pos)}
        finally:
            reference.unlink()
            (ctx.out / (reference.name + ".data")).unlink(missing_ok=True)
    ctx.quantization[LM_FILE] = record
    logger.info("%s: %s, logp SNR %s dB", LM_FILE, plan.label, record.get("snr_db_vs_fp32", {}).get("logp"))


def export_flow_v1(ctx: ExportContext) -> None:
    """Step "flow": ``flow.pt`` -> encoder front, length-regulator convolutions and CFM estimator graphs."""
    import torch

    from cosyedge.export.cosyvoice.v1.nets import EstimatorV1, FlowFrontV1, RegulatorConvs
    from cosyedge.export.cosyvoice.common.flow import _cfg_rate, _mel_features, export_estimator, quiet_export
    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place

    state = _load_state(ctx.source_file("flow.pt"))
    cfg = flow_config(ctx.config, state)
    front_state = {k: v for k, v in state.items() if not k.startswith(("decoder.", "length_regulator."))}
    reg_state = {k[len("length_regulator."):]: v for k, v in state.items() if k.startswith("length_regulator.")}
    est_state = {k[len("decoder.estimator."):]: v for k, v in state.items() if k.startswith("decoder.estimator.")}
    front, estimator = FlowFrontV1(cfg).eval(), EstimatorV1(cfg).eval()
    regulator = RegulatorConvs(cfg.output_size, cfg.regulator_stages, cfg.regulator_groups).eval()
    _strict(front, front_state, "flow.pt (encoder)")
    _strict(regulator, reg_state, "flow.pt (length regulator)")
    _strict(estimator, est_state, "flow.pt (estimator)")
    with torch.no_grad(), quiet_export():
        torch.onnx.export(front, (torch.zeros(1, 9, dtype=torch.int64), torch.randn(1, cfg.spk_embed_dim)),
                          str(ctx.add_file(FLOW_ENCODER_FILE, "flow encoder (non-causal) + speaker projection")),
                          input_names=["tokens", "embedding"], output_names=["h", "spks"],
                          dynamic_axes={"tokens": {1: "n_tokens"}, "h": {1: "n_tokens"}}, opset_version=OPSET,
                          dynamo=False)
        torch.onnx.export(regulator, (torch.randn(1, 80, 15),),
                          str(ctx.add_file(REGULATOR_FILE, "flow length regulator convolutions")),
                          input_names=["x"], output_names=["mu"], dynamic_axes={"x": {2: "n_frames"},
                                                                                "mu": {2: "n_frames"}},
                          opset_version=OPSET, dynamo=False)
    export_estimator(estimator, ctx.add_file(ESTIMATOR_FILE, "flow CFM estimator (non-causal U-Net)"))
    if ctx.quantize == "int8":
        for name in (FLOW_ENCODER_FILE, REGULATOR_FILE, ESTIMATOR_FILE):
            quantize_in_place(ctx, name)
    ctx.runtime["flow"] = {
        "encoder": FLOW_ENCODER_FILE, "regulator": REGULATOR_FILE, "estimator": ESTIMATOR_FILE,
        "vocab_size": cfg.vocab_size, "spk_embed_dim": cfg.spk_embed_dim, "mel_bins": cfg.output_size,
        "input_frame_rate": cfg.input_frame_rate, "n_timesteps": 10, "t_scheduler": "cosine",
        "inference_cfg_rate": _cfg_rate(ctx.config), "noise": "drawn per call (upstream randn_like)",
    }
    ctx.runtime["features"] = _mel_features(ctx.config)


def matmul_kinds(path: Path) -> dict[str, int]:
    """How many products graph ``path`` has of each kind: ``int8-block128``, ``int4-block32``, ...
    (``MatMulNBits``), ``fp32`` (``MatMul`` with a stored weight; a small model's widths may not
    split into blocks)."""
    import collections

    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    stored = {init.name for init in model.graph.initializer}
    kinds: collections.Counter = collections.Counter()
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "MatMulNBits":
            kinds[f"int{attrs['bits']}-block{attrs['block_size']}"] += 1
        elif node.op_type == "MatMul" and node.input[1] in stored:
            kinds["fp32"] += 1
    return dict(sorted(kinds.items()))


def whisper_vocabulary() -> tuple[Path, dict[str, Any]]:
    """The path of whisper's ``multilingual.tiktoken`` and where it came from (package and version)."""
    from importlib import metadata

    try:
        import whisper  # noqa: F401 - only to find its assets folder
    except ImportError as exc:
        raise ModelMissingError("the CosyVoice-300M text tokenizer is whisper's multilingual.tiktoken, "
                                "shipped in the openai-whisper package (export time only); install it with: "
                                "pip install --no-deps openai-whisper==20250625") from exc
    path = Path(whisper.__file__).parent / "assets" / TIKTOKEN_FILE
    if not path.is_file():
        raise ModelMissingError(f"{path} is missing from the installed openai-whisper; reinstall it")
    return path, {"package": "openai-whisper", "version": metadata.version("openai-whisper"),
                  "path": f"whisper/assets/{TIKTOKEN_FILE}"}


def whisper_specials(num_languages: int) -> list[str]:
    """whisper's special tokens after the 50257 ordinary ones, in id order (``whisper.tokenizer.get_encoding``)."""
    from whisper.tokenizer import LANGUAGES

    return ["<|endoftext|>", "<|startoftranscript|>",
            *[f"<|{lang}|>" for lang in list(LANGUAGES)[:num_languages]],
            "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
            "<|notimestamps|>", *[f"<|{i * 0.02:.2f}|>" for i in range(1501)]]


#: whisper's pre-tokenization pattern (``get_encoding``'s ``pat_str``).
WHISPER_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def export_frontend_v1(ctx: ExportContext) -> None:
    """Step "frontend": the tiktoken vocabulary (+ its specials), campplus, the speech tokenizer, presets."""
    from cosyedge.export.cosyvoice.common.llm import (_parsed_onnx, int8_speech_tokenizer, move_weights_to_external_data,
                                                      save_presets)
    from cosyedge.catalog.manifest import sha256_file

    vocab, origin = whisper_vocabulary()
    tok = ctx.config.get("get_tokenizer", {}) if isinstance(ctx.config.get("get_tokenizer"), dict) else {}
    if not str(tok.get("__name__", "whisper.tokenizer.get_tokenizer")).startswith("whisper."):
        raise InputError(f"{CONFIG_NAME} asks for tokenizer {tok.get('__name__')!r}; only whisper's "
                         "multilingual tiktoken (the 50 Hz CosyVoice-300M models) is supported")
    num_languages = int(tok.get("num_languages", 100))
    dest = ctx.add_file(f"{TOKENIZER_DIR}/{TIKTOKEN_FILE}", "frontend.tokenizer")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(vocab, dest)
    specials = whisper_specials(num_languages)
    ranks = sum(1 for line in dest.read_text(encoding="utf-8").splitlines() if line.strip())
    spec = {"format": 1, "vocabulary": TIKTOKEN_FILE, "sha256": sha256_file(dest), "origin": origin,
            "pattern": WHISPER_PATTERN, "specials": specials, "first_special": ranks,
            "n_vocab": ranks + len(specials), "allowed_special": str(ctx.config.get("allowed_special", "all"))}
    (ctx.add_file(f"{TOKENIZER_DIR}/tokenizer.json", "frontend.tokenizer")).write_text(
        json.dumps(spec, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    text_vocab = ctx.runtime.get("llm", {}).get("text_vocab")
    if text_vocab is not None and text_vocab != spec["n_vocab"]:
        raise InputError(f"the LLM has {text_vocab} text tokens, whisper's multilingual tokenizer "
                         f"{spec['n_vocab']}: not a 50 Hz CosyVoice-300M checkpoint")
    for name in ("campplus.onnx", SPEECH_TOKENIZER):
        source = read_source(ctx.source_file(name), _parsed_onnx)
        shutil.copyfile(source, ctx.add_file(name, "frontend." + name.split(".")[0]))
    if ctx.options.get("speech_tokenizer_int8"):
        ctx.quantization[SPEECH_TOKENIZER] = int8_speech_tokenizer(ctx.out / SPEECH_TOKENIZER)
    data = move_weights_to_external_data(ctx.out / SPEECH_TOKENIZER)
    ctx.add_file(data.name, "frontend.speech_tokenizer_weights")
    runtime = {"tokenizer": TOKENIZER_DIR, "campplus": "campplus.onnx", "speech_tokenizer": SPEECH_TOKENIZER,
               "speech_token_rate": 50}
    runtime.update(save_presets(ctx))
    ctx.runtime["frontend"] = runtime


EXPORT_STEPS = [("llm", export_lm), ("flow", export_flow_v1), ("hift", hift_step),
                ("frontend", export_frontend_v1), ("compact", compact_step)]
SPEC = ModelSpec(version=VERSION, label="CosyVoice-300M", config_name=CONFIG_NAME, steps=tuple(EXPORT_STEPS),
                 sources=STEP_SOURCES, licence=LICENCE)


# ----------------------------------------------------------------------------------------------
# Orchestration
# ----------------------------------------------------------------------------------------------

def convert(src: Path, out: Path, quantize: str = "int8", variant: str | None = None, force: bool = False,
            steps: list[str] | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the v1 export steps from ``src`` into ``out``; returns the manifest written there.

    ``options``: ``llm_bits`` (8 or 4: the LLM step graph's weights) and ``speech_tokenizer_int8``, as for
    CosyVoice2; both need ``quantize="int8"`` and are refused before any step otherwise."""
    from cosyedge import __version__
    from cosyedge.export import require_torch
    from cosyedge.export.cosyvoice.common.llm import check_options
    from cosyedge.export.cosyvoice.common.upstream_config import read_config

    require_torch()
    src, out = Path(src), Path(out)
    options = {k: v for k, v in (options or {}).items() if v}
    check_options(quantize, options)
    check_arguments(src, quantize, "CosyVoice-300M")
    if not (src / CONFIG_NAME).is_file():
        hint = " (it holds cosyvoice2.yaml: use `convert cosyvoice2`)" if (src / "cosyvoice2.yaml").is_file() else ""
        raise ModelMissingError(f"{src / CONFIG_NAME} is missing: point --src at the official "
                                f"CosyVoice-300M(-SFT/-Instruct) directory{hint}")
    variant = variant or detect_variant(src)
    if variant not in VARIANTS:
        raise InputError(f"--variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    check_out(src, out, force)
    chosen = chosen_steps(EXPORT_STEPS, steps)
    missing = [name for step in chosen for name in STEP_SOURCES.get(step, ())
               if not (src / name).is_file() or (src / name).stat().st_size == 0]
    if missing:
        raise ModelMissingError(f"{src} lacks {', '.join(missing)} (missing or empty): copy or download the "
                                f"complete {VARIANT_NAMES[variant]} directory")
    if variant in ("sft", "instruct") and not (src / "spk2info.pt").is_file():
        raise ModelMissingError(f"{src} lacks spk2info.pt, the preset speakers of {VARIANT_NAMES[variant]}")
    config = read_config(src / CONFIG_NAME)

    def finish(ctx: ExportContext) -> dict[str, Any]:
        has_presets = "presets" in ctx.runtime.get("frontend", {})
        ctx.runtime["model"] = {"variant": variant, "name": VARIANT_NAMES[variant],
                                "modes": modes_of(variant, has_presets), "variant_detected": variant == detect_variant(src)}
        manifest = build_manifest(ctx, __version__, chosen, default_rate=22050)
        manifest["variant"] = variant
        (ctx.out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
        return manifest

    return export_into(out, lambda tmp: ExportContext(src=src, out=tmp, config=config, spec=SPEC, quantize=quantize,
                                                      options=options),
                       EXPORT_STEPS, chosen, finish)
