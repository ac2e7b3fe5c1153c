"""Export step "flow": ``flow.pt`` -> encoder-front graph, CFM estimator graph and the fixed CFM noise.

Files written:

* ``flow_encoder.onnx`` - (tokens int64 [1, N], embedding [1, 192]) -> (mu [1, 80, 2N], spks [1, 80]).
  Token embedding, UpsampleConformerEncoder, projection, and the L2-normalised speaker projection.
* ``flow_estimator.onnx`` - (x, mu, t, spks, cond) -> estimator_out, batch and T dynamic: upstream's
  estimator for unpadded input (mask = 1, which is all our runtime uses), exported from ``flow.pt`` in
  a CPU-friendly form (see ``flow_nets``: fused attention, convs as MatMuls). Upstream's shipped
  ``flow.decoder.estimator.fp32.onnx`` (same weights, unfused, with the mask) is not used.
* ``flow_noise.npy`` - float32 [80, 15000]: upstream's ``rand_noise`` (``torch.randn`` after seeding 0).
* ``flow_encoder_stream.onnx`` / ``flow_estimator_stream.onnx`` - the same weights as one chunk of
  upstream's chunk-causal ``streaming=True`` flow, with the earlier chunks' state as cache inputs and
  the new chunk's share as outputs (see ``flow_stream_nets``); the manifest's ``flow.stream`` section
  gives the chunk sizes, cache shapes and the estimator's cache layout (``kv_layout``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Iterator

from cosyedge.errors import InputError
from cosyedge.export import read_source
from cosyedge.export.cosyvoice.common.upstream_config import section

logger = logging.getLogger(__name__)

SHIPPED_ESTIMATOR = "flow.decoder.estimator.fp32.onnx"
ENCODER_FILE = "flow_encoder.onnx"
ENCODER_STREAM_FILE = "flow_encoder_stream.onnx"
ESTIMATOR_STREAM_FILE = "flow_estimator_stream.onnx"
ESTIMATOR_FILE = "flow_estimator.onnx"
NOISE_FILE = "flow_noise.npy"
NOISE_FRAMES = 15000
OPSET = 17
#: The streamed estimator's cache inputs (manifest ``flow.stream.kv_layout``): per attention layer, the
#: earlier chunks' keys and values in the layout the attention reads. Models converted before it have
#: no ``kv_layout`` (one packed ``kv`` input); the runtime still streams them.
KV_LAYOUT = "chunk_blocked"


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """Silence the exporter's known, harmless warnings (legacy exporter notice, tracer constants)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        try:
            from torch.jit import TracerWarning
            warnings.simplefilter("ignore", category=TracerWarning)
        except ImportError:  # pragma: no cover - older torch
            pass
        yield


def flow_config(config: dict[str, Any]):
    """FlowConfig from the parsed yaml's ``flow`` section (CausalMaskedDiffWithXvec only)."""
    from cosyedge.export.cosyvoice.common.flow_nets import FlowConfig

    flow = section(config, "flow")
    if not str(flow.get("__class__", "")).endswith("CausalMaskedDiffWithXvec"):
        raise InputError(f"flow class {flow.get('__class__')!r} is not CosyVoice2's CausalMaskedDiffWithXvec")
    enc = section(config, "flow", "encoder")
    est = section(config, "flow", "decoder", "estimator")
    channels = list(est.get("channels", [256]))
    if len(channels) != 1:
        raise InputError(f"estimator channels {channels}: only the one-level CosyVoice2 U-Net is supported")
    if enc.get("use_cnn_module") or enc.get("macaron_style"):
        raise InputError("flow encoder with conv module or macaron FFN is not CosyVoice2's; unsupported")
    if enc.get("output_size", 512) != flow.get("input_size", 512):
        raise InputError("flow encoder output_size must equal flow input_size")
    return FlowConfig(
        vocab_size=int(flow.get("vocab_size", 6561)), input_size=int(flow.get("input_size", 512)),
        output_size=int(flow.get("output_size", 80)), spk_embed_dim=int(flow.get("spk_embed_dim", 192)),
        pre_lookahead_len=int(flow.get("pre_lookahead_len", 3)),
        token_mel_ratio=int(flow.get("token_mel_ratio", 2)),
        attention_heads=int(enc.get("attention_heads", 8)), linear_units=int(enc.get("linear_units", 2048)),
        num_blocks=int(enc.get("num_blocks", 6)),
        est_in_channels=int(est.get("in_channels", 320)), est_out_channels=int(est.get("out_channels", 80)),
        est_channels=int(channels[0]), est_attention_head_dim=int(est.get("attention_head_dim", 64)),
        est_n_blocks=int(est.get("n_blocks", 4)), est_num_mid_blocks=int(est.get("num_mid_blocks", 12)),
        est_num_heads=int(est.get("num_heads", 8)))


def load_flow(state: dict, cfg):
    """Our FlowFront and Estimator with the official ``flow.pt`` loaded strictly (every key, every shape)."""
    from cosyedge.export.cosyvoice.common.flow_nets import Estimator, FlowFront

    prefix = "decoder.estimator."
    front_state = {k: v for k, v in state.items() if not k.startswith("decoder.")}
    est_state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    stray = [k for k in state if k.startswith("decoder.") and not k.startswith(prefix)]
    if stray:
        raise InputError(f"flow.pt has unexpected keys {stray[:5]}")
    front, estimator = FlowFront(cfg).eval(), Estimator(cfg).eval()
    try:
        front.load_state_dict(front_state, strict=True)
        estimator.load_state_dict(est_state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"flow.pt does not match the sizes in cosyvoice2.yaml: {exc}") from exc
    return front, estimator


def fixed_noise():
    """Upstream's CFM noise: ``torch.randn(1, 80, 15000)`` right after ``manual_seed(0)``."""
    import torch
    return torch.randn(1, 80, NOISE_FRAMES, generator=torch.Generator().manual_seed(0))[0]


def export_flow(ctx) -> None:
    """The "flow" export step (see module docstring)."""
    import numpy as np
    import torch

    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place

    cfg = flow_config(ctx.config)
    state = read_source(ctx.source_file("flow.pt"),
                        lambda p: torch.load(p, map_location="cpu", weights_only=True))
    front, estimator = load_flow(state, cfg)

    encoder_path = ctx.add_file(ENCODER_FILE, "flow encoder front + speaker projection")
    with torch.no_grad(), quiet_export():
        torch.onnx.export(
            front, (torch.zeros(1, 8, dtype=torch.int64), torch.randn(1, cfg.spk_embed_dim)), str(encoder_path),
            input_names=["tokens", "embedding"], output_names=["mu", "spks"],
            dynamic_axes={"tokens": {1: "n_tokens"}, "mu": {2: "n_frames"}},
            opset_version=OPSET, dynamo=False)

    estimator_path = ctx.add_file(ESTIMATOR_FILE, "flow CFM estimator (full-length, fused attention)")
    if (ctx.src / SHIPPED_ESTIMATOR).is_file():
        logger.info("not using the shipped %s: the graph exported from flow.pt has the same weights and "
                    "fused attention", SHIPPED_ESTIMATOR)
    export_estimator(estimator, estimator_path)
    ctx.files[ESTIMATOR_FILE]["origin"] = "flow.pt"

    stream = export_stream_graphs(front, estimator, cfg, ctx)

    noise_path = ctx.add_file(NOISE_FILE, "fixed CFM start noise [80, 15000]")
    np.save(noise_path, fixed_noise().numpy().astype(np.float32))

    if ctx.quantize == "int8":
        quantize_in_place(ctx, ENCODER_FILE)
        quantize_in_place(ctx, ESTIMATOR_FILE)
        quantize_in_place(ctx, ENCODER_STREAM_FILE)
        quantize_in_place(ctx, ESTIMATOR_STREAM_FILE)

    ctx.runtime["flow"] = {
        "encoder": ENCODER_FILE, "estimator": ESTIMATOR_FILE, "noise": NOISE_FILE,
        "token_mel_ratio": cfg.token_mel_ratio, "pre_lookahead_len": cfg.pre_lookahead_len,
        "vocab_size": cfg.vocab_size, "spk_embed_dim": cfg.spk_embed_dim, "mel_bins": cfg.output_size,
        "n_timesteps": 10, "t_scheduler": "cosine", "inference_cfg_rate": _cfg_rate(ctx.config),
        "stream": stream,
    }
    ctx.runtime["features"] = _mel_features(ctx.config)


def export_estimator(estimator, path) -> None:
    """Write ``estimator`` (a :class:`~cosyedge.export.cosyvoice.common.flow_nets.Estimator`) as an ONNX graph to ``path``.

    Inputs (x, mu, t, spks, cond), batch and frames dynamic; no ``mask`` (our runtime never pads), each
    attention one ``com.microsoft.MultiHeadAttention`` node, convolutions as MatMuls.
    """
    import torch

    t = 64
    example = (torch.randn(2, 80, t), torch.randn(2, 80, t), torch.rand(2), torch.randn(2, 80),
               torch.randn(2, 80, t))
    seq = {0: "batch", 2: "n_frames"}
    with torch.no_grad(), quiet_export():
        torch.onnx.export(
            estimator, example, str(path),
            input_names=["x", "mu", "t", "spks", "cond"], output_names=["estimator_out"],
            dynamic_axes={"x": seq, "mu": seq, "cond": seq, "t": {0: "batch"}, "spks": {0: "batch"},
                          "estimator_out": seq},
            opset_version=OPSET, custom_opsets={"com.microsoft": 1}, dynamo=False)


def export_stream_graphs(front, estimator, cfg, ctx) -> dict[str, Any]:
    """Write the two chunk-step graphs; returns the manifest's ``flow.stream`` section."""
    import torch

    from cosyedge.export.cosyvoice.common.flow_stream_nets import CONV_TAIL, EncoderStep, EstimatorStep

    chunk_tokens = _chunk_tokens(ctx.config)
    d = cfg.input_size
    downs, ups = len(front.encoder.encoders), len(front.encoder.up_encoders)
    path = ctx.add_file(ENCODER_STREAM_FILE, "flow encoder, one chunk of the chunk-causal (streaming) form")
    n, p = 5, 3
    example = (torch.zeros(1, n, dtype=torch.int64), torch.zeros(1, cfg.pre_lookahead_len, dtype=torch.int64),
               torch.tensor([cfg.pre_lookahead_len]), torch.randn(1, cfg.spk_embed_dim),
               torch.randn(1, CONV_TAIL, d), torch.randn(p, downs, 2, 1, d), torch.randn(1, CONV_TAIL, d),
               torch.randn(2 * p, ups, 2, 1, d))
    with torch.no_grad(), quiet_export():
        torch.onnx.export(
            EncoderStep(front).eval(), example, str(path),
            input_names=["tokens", "context", "n_context", "embedding", "pre_tail", "kv_down", "up_tail",
                         "kv_up"],
            output_names=["mu", "spks", "pre_tail_out", "kv_down_out", "up_tail_out", "kv_up_out"],
            dynamic_axes={"tokens": {1: "n_tokens"}, "kv_down": {0: "past_tokens"}, "kv_up": {0: "past_frames"},
                          "mu": {2: "n_frames"}, "kv_down_out": {0: "n_tokens"}, "kv_up_out": {0: "n_frames"}},
            opset_version=OPSET, dynamo=False)

    layout = EstimatorStep.layout(estimator)
    # int8 graphs are approximate already (~20 dB SNR); a float16 key/value cache halves the memory
    # that grows with the utterance at no audible cost. fp32 graphs keep a float32 cache (parity).
    kv_dtype = torch.float16 if ctx.quantize == "int8" else torch.float32
    chunk_frames = chunk_tokens * cfg.token_mel_ratio
    path = ctx.add_file(ESTIMATOR_STREAM_FILE, "flow CFM estimator, one chunk with per-step caches")
    t = 6
    example = (torch.randn(2, 80, t), torch.randn(2, 80, t), torch.rand(2), torch.randn(2, 80),
               torch.randn(2, 80, t), torch.randn(layout["conv_layers"], 2, CONV_TAIL, layout["conv_channels"]))
    names, shares = EstimatorStep.cache_names(layout["attention_layers"])
    # One earlier chunk to trace with; the chunk count is dynamic (0 at a stream's first chunk).
    past = [torch.randn(1, 2, layout["heads"], chunk_frames, layout["head_dim"]).to(kv_dtype) for _ in names]
    seq = {0: "batch", 2: "n_frames"}
    with torch.no_grad(), quiet_export():
        torch.onnx.export(
            EstimatorStep(estimator, kv_dtype).eval(), (*example, *past), str(path),
            input_names=["x", "mu", "t", "spks", "cond", "conv", *names],
            output_names=["estimator_out", *shares, "conv_out"],
            dynamic_axes={"x": seq, "mu": seq, "cond": seq, "t": {0: "batch"}, "spks": {0: "batch"},
                          "conv": {1: "batch"}, "estimator_out": seq, "conv_out": {1: "batch"},
                          **{name: {0: "past_chunks", 1: "batch"} for name in names},
                          **{name: {1: "batch", 3: "n_frames"} for name in shares}},
            opset_version=OPSET, custom_opsets={"com.microsoft": 1}, dynamo=False)
    return {"encoder": ENCODER_STREAM_FILE, "estimator": ESTIMATOR_STREAM_FILE, "chunk_tokens": chunk_tokens,
            "conv_tail": CONV_TAIL, "model_dim": d, "down_layers": downs, "up_layers": ups,
            "kv_dtype": "float16" if kv_dtype == torch.float16 else "float32", "kv_layout": KV_LAYOUT,
            "chunk_frames": chunk_frames, **layout}


def _chunk_tokens(config: dict[str, Any]) -> int:
    """The encoder's ``static_chunk_size`` (the estimator's is this times token_mel_ratio)."""
    enc = section(config, "flow", "encoder")
    est = section(config, "flow", "decoder", "estimator")
    chunk = int(enc.get("static_chunk_size", 25) or 25)
    ratio = int(section(config, "flow").get("token_mel_ratio", 2))
    if int(est.get("static_chunk_size", chunk * ratio)) != chunk * ratio:
        raise InputError("estimator chunk is not the encoder chunk in mel frames; not CosyVoice2's streaming")
    if int(est.get("num_decoding_left_chunks", -1)) >= 0:
        logger.warning("the yaml limits the estimator's left chunks; upstream's decoder ignores it (all left "
                       "chunks are attended), and so does this converter")
    return chunk


def _cfg_rate(config: dict[str, Any]) -> float:
    params = config.get("flow", {}).get("decoder", {}).get("cfm_params", {})
    params = params.get("content", params) if isinstance(params, dict) else {}
    if params.get("t_scheduler", "cosine") != "cosine" or params.get("solver", "euler") != "euler":
        raise InputError("only the Euler solver with the cosine schedule is supported (CosyVoice2's)")
    return float(params.get("inference_cfg_rate", 0.7))


def _mel_features(config: dict[str, Any]) -> dict[str, Any]:
    """The prompt-mel settings (``feat_extractor``), with CosyVoice2's values as defaults."""
    feat = config.get("feat_extractor", {}) if isinstance(config.get("feat_extractor"), dict) else {}
    return {
        "sample_rate": int(feat.get("sampling_rate", config.get("sample_rate", 24000))),
        "n_fft": int(feat.get("n_fft", 1920)), "hop_size": int(feat.get("hop_size", 480)),
        "win_size": int(feat.get("win_size", 1920)), "num_mels": int(feat.get("num_mels", 80)),
        "fmin": float(feat.get("fmin", 0)),
        "fmax": None if feat.get("fmax", 8000) is None else float(feat.get("fmax", 8000)),
    }
