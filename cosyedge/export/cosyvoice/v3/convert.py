"""Convert an official Fun-CosyVoice3-0.5B checkpoint directory into a cosyedge ONNX model directory.

Input (as downloaded): ``cosyvoice3.yaml``, ``llm.pt`` (or ``llm.rl.pt``) + ``CosyVoice-BlankEN/``,
``flow.pt``, ``hift.pt``, ``campplus.onnx``, ``speech_tokenizer_v3.onnx``. The conversion runs in the shared
frame (:func:`cosyedge.export.cosyvoice.common.pipeline.convert`: same context, temporary directory, manifest
with sha256s) with this version's :data:`SPEC`: the LLM, frontend and compact steps are the shared
CosyVoice2-form ones (they read the version from the context), the flow and HiFT steps are here.

Files written by the v3 steps:

* ``flow_encoder.onnx`` - (tokens, embedding) -> (mu, spks): embedding + pre-lookahead + x2 repeat.
* ``flow_estimator.onnx`` - the DiT, same inputs/outputs as CosyVoice2's estimator graph.
* ``flow_estimator_stream.onnx`` - one 50-frame chunk of the DiT with upstream's streaming attention
  (chunk-causal, every left chunk) from per-step caches of the chunks before it: each layer's
  keys/values and the position convolutions' last inputs (the manifest's ``flow.stream``, layout
  :data:`STREAM_LAYOUT`; float16 keys/values in int8 models, as CosyVoice2's).
* ``flow_noise.npy`` - upstream's fixed CFM start noise (same draw as CosyVoice2's).
* ``hift_decoder.onnx`` - the causal HiFT decoder; ``hift_f0.npz`` - the causal F0 predictor's weights
  (the runtime runs it in float64, as upstream does); ``hift_source.npz`` - ``m_source.l_linear``.

Upstream's causal HiFT also draws two noise buffers at construction (~288 MB at full size) that are
not in ``hift.pt``; nothing of them is saved: the runtime draws its own (``causal_hift``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cosyedge.errors import InputError
from cosyedge.export import read_source
from cosyedge.export.cosyvoice.common import pipeline
from cosyedge.export.cosyvoice.common.pipeline import ModelSpec
from cosyedge.export.cosyvoice.common.upstream_config import section

logger = logging.getLogger(__name__)

VERSION = 3
CONFIG_NAME = "cosyvoice3.yaml"
ENCODER_FILE = "flow_encoder.onnx"
ESTIMATOR_FILE = "flow_estimator.onnx"
ESTIMATOR_STREAM_FILE = "flow_estimator_stream.onnx"
#: How the streamed flow's cache is laid out (the manifest's ``flow.stream.kv_layout``): per layer,
#: chunk-blocked, as CosyVoice2's; the catalog compares it with its own record of today's layout to
#: say what a reconversion brings.
STREAM_LAYOUT = "chunk_blocked"
#: Upstream CosyVoice3Model's hop schedule (ace7c47): 25 tokens (+ the prompt's padding to a chunk),
#: each hop doubling up to 100.
HOP_TOKENS, MAX_HOP_TOKENS, HOP_SCALE = 25, 100, 2
NOISE_FILE = "flow_noise.npy"
DECODER_FILE = "hift_decoder.onnx"
F0_FILE = "hift_f0.npz"
SOURCE_FILE = "hift_source.npz"
OPSET = 17
#: The classes a CosyVoice3 yaml names; any other is refused by name (an unknown or older recipe).
CLASSES = {"llm": "CosyVoice3LM", "flow": "CausalMaskedDiffWithDiT", "hift": "CausalHiFTGenerator"}


def check_config(config: dict[str, Any]) -> None:
    """The yaml describes CosyVoice3 (its three classes), or an InputError naming what it describes."""
    for part, cls in CLASSES.items():
        found = str(section(config, part).get("__class__", ""))
        if not found.endswith(cls):
            raise InputError(f"{CONFIG_NAME}: {part} is {found or 'missing'!r}, not {cls}: this is not a "
                             "Fun-CosyVoice3 config (an unknown or modified recipe)",
                             code="convert_unknown_config", part=part, found=found)


# ----------------------------------------------------------------------------------------------
# flow
# ----------------------------------------------------------------------------------------------

def dit_config(config: dict[str, Any]):
    from cosyedge.export.cosyvoice.v3.nets import DiTConfig

    check_config(config)
    flow = section(config, "flow")
    look = section(config, "flow", "pre_lookahead_layer")
    est = section(config, "flow", "decoder", "estimator")
    try:
        return DiTConfig(
            vocab_size=int(flow.get("vocab_size", 6561)), input_size=int(flow.get("input_size", 80)),
            output_size=int(flow.get("output_size", 80)), spk_embed_dim=int(flow.get("spk_embed_dim", 192)),
            token_mel_ratio=int(flow.get("token_mel_ratio", 2)),
            pre_lookahead_len=int(look.get("pre_lookahead_len", 3)),
            lookahead_channels=int(look.get("channels", 1024)), dim=int(est["dim"]), depth=int(est["depth"]),
            heads=int(est["heads"]), dim_head=int(est["dim_head"]), ff_mult=int(est.get("ff_mult", 2)),
            mel_dim=int(est.get("mel_dim", 80)), mu_dim=int(est.get("mu_dim", 80)), spk_dim=int(est.get("spk_dim", 80)))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{CONFIG_NAME}: the DiT estimator section lacks or mangles {exc}") from exc


def stream_chunk_frames(config: dict[str, Any], cfg) -> int:
    """The DiT's ``static_chunk_size`` in mel frames (upstream: chunk_size 25 x token_mel_ratio), which
    upstream's 25-token hops need. (Its ``num_decoding_left_chunks`` is not read: upstream's DiT
    attends to every left chunk whatever it says.)"""
    est = section(config, "flow", "decoder", "estimator")
    expected = HOP_TOKENS * cfg.token_mel_ratio
    try:
        frames = int(est.get("static_chunk_size", expected))
    except (TypeError, ValueError) as exc:
        raise InputError(f"{CONFIG_NAME}: the DiT's static_chunk_size: {exc}") from exc
    if frames != expected:
        raise InputError(f"{CONFIG_NAME}: the DiT streams in chunks of {frames} frames; upstream's hops of "
                         f"{HOP_TOKENS} tokens need {expected}", code="convert_unknown_config", part="flow",
                         found=str(frames))
    return frames


def export_dit_step(estimator, path, chunk_frames: int, kv_dtype) -> dict[str, Any]:
    """Write the DiT chunk-step graph (:class:`~cosyedge.export.cosyvoice.v3.nets.DiTChunkStep`) to
    ``path``; returns the cache sizes for the manifest's ``flow.stream``."""
    import torch

    from cosyedge.export.cosyvoice.common.flow import quiet_export
    from cosyedge.export.cosyvoice.v3.nets import DiTChunkStep

    blocks = estimator.transformer_blocks
    heads = blocks[0].attn.heads
    dim_head = blocks[0].attn.to_q.out_features // heads
    dim, kernel = estimator.dim, estimator.input_embed.conv_pos_embed.kernel
    t = 6
    example = (torch.randn(2, 80, t), torch.randn(2, 80, t), torch.rand(2), torch.randn(2, 80), torch.randn(2, 80, t),
               torch.tensor([chunk_frames]), torch.randn(2, 2, kernel - 1, dim))
    names = [f"{kind}_{i}" for i in range(len(blocks)) for kind in ("key", "value")]
    shares = [f"kv_out_{i}" for i in range(len(blocks))]
    # One earlier chunk to trace with; the chunk count is dynamic (0 at a stream's first chunk).
    past = [torch.randn(1, 2, heads, chunk_frames, dim_head).to(kv_dtype) for _ in names]
    seq = {0: "batch", 2: "n_frames"}
    with torch.no_grad(), quiet_export():
        torch.onnx.export(
            DiTChunkStep(estimator, kv_dtype).eval(), (*example, *past), str(path),
            input_names=["x", "mu", "t", "spks", "cond", "offset", "conv", *names],
            output_names=["estimator_out", *shares, "conv_out"],
            dynamic_axes={"x": seq, "mu": seq, "cond": seq, "t": {0: "batch"}, "spks": {0: "batch"},
                          "conv": {1: "batch"}, "estimator_out": seq, "conv_out": {1: "batch"},
                          **{name: {0: "past_chunks", 1: "batch"} for name in names},
                          **{name: {1: "batch", 3: "n_frames"} for name in shares}},
            opset_version=OPSET, custom_opsets={"com.microsoft": 1}, dynamo=False)
    return {"attention_layers": len(blocks), "heads": heads, "head_dim": dim_head, "conv_layers": 2,
            "conv_tail": kernel - 1, "conv_channels": dim,
            "kv_dtype": "float16" if kv_dtype == torch.float16 else "float32"}


def load_flow(state: dict, cfg):
    """Our DiTFront and DiTEstimator with ``flow.pt`` loaded strictly."""
    from cosyedge.export.cosyvoice.v3.nets import DiTEstimator, DiTFront

    prefix = "decoder.estimator."
    if any(k.startswith("encoder.") for k in state):
        raise InputError("flow.pt has a Conformer encoder: it is CosyVoice2's flow, not CosyVoice3's DiT flow")
    front_state = {k: v for k, v in state.items() if not k.startswith("decoder.")}
    est_state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    front, estimator = DiTFront(cfg).eval(), DiTEstimator(cfg).eval()
    try:
        front.load_state_dict(front_state, strict=True)
        estimator.load_state_dict(est_state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise InputError(f"flow.pt does not match the DiT flow of {CONFIG_NAME}: "
                         f"{' '.join(first[:2])[:300]}") from exc
    return front, estimator


def export_flow(ctx) -> None:
    """The v3 "flow" export step (see module docstring)."""
    import numpy as np
    import torch

    from cosyedge.export.cosyvoice.common.flow import _cfg_rate, _mel_features, export_estimator, fixed_noise, quiet_export
    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place

    cfg = dit_config(ctx.config)
    state = read_source(ctx.source_file("flow.pt"), lambda p: torch.load(p, map_location="cpu", weights_only=True))
    front, estimator = load_flow(state, cfg)
    encoder_path = ctx.add_file(ENCODER_FILE, "flow token embedding + pre-lookahead + speaker projection")
    with torch.no_grad(), quiet_export():
        torch.onnx.export(front, (torch.zeros(1, 8, dtype=torch.int64), torch.randn(1, cfg.spk_embed_dim)),
                          str(encoder_path), input_names=["tokens", "embedding"], output_names=["mu", "spks"],
                          dynamic_axes={"tokens": {1: "n_tokens"}, "mu": {2: "n_frames"}},
                          opset_version=OPSET, dynamo=False)
    export_estimator(estimator, ctx.add_file(ESTIMATOR_FILE, "flow DiT estimator (full attention, fused)"))
    ctx.files[ESTIMATOR_FILE]["origin"] = "flow.pt"
    chunk_frames = stream_chunk_frames(ctx.config, cfg)
    # int8 graphs are approximate already; a float16 key/value cache halves what grows with the
    # sentence. fp32 graphs keep a float32 cache (parity).
    kv_dtype = torch.float16 if ctx.quantize == "int8" else torch.float32
    layout = export_dit_step(estimator, ctx.add_file(ESTIMATOR_STREAM_FILE, "flow DiT estimator, one chunk of "
                                                     "the streamed (chunk-causal) form with per-step caches"),
                             chunk_frames, kv_dtype)
    ctx.files[ESTIMATOR_STREAM_FILE]["origin"] = "flow.pt"
    np.save(ctx.add_file(NOISE_FILE, "fixed CFM start noise [80, 15000]"), fixed_noise().numpy().astype(np.float32))
    if ctx.quantize == "int8":
        quantize_in_place(ctx, ENCODER_FILE)
        quantize_in_place(ctx, ESTIMATOR_FILE)
        quantize_in_place(ctx, ESTIMATOR_STREAM_FILE)
    stream = {"estimator": ESTIMATOR_STREAM_FILE, "kv_layout": STREAM_LAYOUT, "chunk_frames": chunk_frames,
              "hop_tokens": HOP_TOKENS, "max_hop_tokens": MAX_HOP_TOKENS, "hop_scale": HOP_SCALE, **layout}
    ctx.runtime["flow"] = {"stream": stream,
        "encoder": ENCODER_FILE, "estimator": ESTIMATOR_FILE, "noise": NOISE_FILE, "kind": "dit",
        "token_mel_ratio": cfg.token_mel_ratio, "pre_lookahead_len": cfg.pre_lookahead_len,
        "vocab_size": cfg.vocab_size, "spk_embed_dim": cfg.spk_embed_dim, "mel_bins": cfg.output_size,
        "n_timesteps": 10, "t_scheduler": "cosine", "inference_cfg_rate": _cfg_rate(ctx.config),
    }
    ctx.runtime["features"] = _mel_features(ctx.config)


# ----------------------------------------------------------------------------------------------
# HiFT
# ----------------------------------------------------------------------------------------------

def export_hift(ctx) -> None:
    """The v3 "hift" export step: causal decoder graph, F0-predictor and source weights."""
    import numpy as np
    import torch

    from cosyedge.export.cosyvoice.common import hift
    from cosyedge.export.cosyvoice.v3.nets import CausalDecoderNet
    from cosyedge.export.cosyvoice.common.hift_nets import fold_weight_norm
    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place

    check_config(ctx.config)
    cfg = hift.hift_config(ctx.config)
    look_right = int(section(ctx.config, "hift").get("conv_pre_look_right", 4))
    state = read_source(ctx.source_file("hift.pt"), lambda p: torch.load(p, map_location="cpu", weights_only=True))
    f0, source, dec_state = hift.split_state(fold_weight_norm(state))
    expected_f0 = {f"condnet.{2 * i}.{p}" for i in range(5) for p in ("weight", "bias")} | \
        {"classifier.weight", "classifier.bias"}
    if set(f0) != expected_f0 or set(source) != {"weight", "bias"}:
        raise InputError(f"hift.pt is not a causal HiFT: F0 predictor keys {sorted(f0)[:4]}..., "
                         f"source keys {sorted(source)}")
    if tuple(f0["condnet.0.weight"].shape[2:]) != (4,):
        raise InputError("hift.pt: the first F0 conv is not the causal kernel-4 one (is this CosyVoice2's hift.pt?)")
    decoder = CausalDecoderNet(cfg, look_right).eval()
    try:
        decoder.load_state_dict(dec_state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise InputError(f"hift.pt does not match the causal HiFT of {CONFIG_NAME}: "
                         f"{' '.join(first[:2])[:300]}") from exc

    mel = torch.randn(1, cfg.in_channels, 20)
    hift.export_decoder(decoder, mel, cfg, ctx.add_file(DECODER_FILE, "causal HiFT decoder network"))
    np.savez(ctx.add_file(F0_FILE, "causal F0 predictor weights (run in float64)"),
             **{k.replace(".", "_"): v.numpy().astype(np.float32) for k, v in f0.items()})
    hift.save_source(ctx, source)
    if ctx.quantize == "int8":
        quantize_in_place(ctx, DECODER_FILE)
    ctx.runtime["hift"] = {"kind": "causal", **hift.runtime_constants(cfg, F0_FILE), "f0_lookahead": 3,
                           "conv_pre_look_right": look_right}


# ----------------------------------------------------------------------------------------------
# The conversion
# ----------------------------------------------------------------------------------------------

def _flow_step(ctx) -> None:
    export_flow(ctx)


def _hift_step(ctx) -> None:
    export_hift(ctx)


SPEC = ModelSpec(
    version=VERSION, label="Fun-CosyVoice3-0.5B", config_name=CONFIG_NAME,
    steps=(("flow", _flow_step), ("hift", _hift_step), ("llm", pipeline.llm_step),
           ("frontend", pipeline.frontend_step), ("compact", pipeline.compact_step)),
    sources={"flow": ("flow.pt",), "hift": ("hift.pt",),
             "llm": ("llm.pt|llm.rl.pt", "CosyVoice-BlankEN/config.json"),
             "frontend": ("campplus.onnx", "speech_tokenizer_v3.onnx")},
    other_configs={"cosyvoice2.yaml": "cosyvoice2", "cosyvoice.yaml": "cosyvoice1"},
    licence={"weights": "Apache-2.0 (FunAudioLLM/Fun-CosyVoice3-0.5B-2512; see its model card)",
             "code": "Apache-2.0 (FunAudioLLM/CosyVoice)"})


def convert(src: Path, out: Path, quantize: str = "int8", steps: list[str] | None = None, force: bool = False,
            options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The shared :func:`~cosyedge.export.cosyvoice.common.pipeline.convert` with the CosyVoice3 spec (int8 default)."""
    from cosyedge.export.cosyvoice.common.upstream_config import read_config

    src = Path(src)
    if (src / CONFIG_NAME).is_file():
        check_config(read_config(src / CONFIG_NAME))  # before any step: an unknown recipe is named at once
    return pipeline.convert(src, out, SPEC, quantize=quantize, steps=steps, force=force, options=options)
