"""Export step "hift": ``hift.pt`` -> F0 graph, decoder graph and the source-module weights.

Files written:

* ``hift_f0.onnx`` - mel [1, 80, T] -> f0 [1, T] (Hz). Always fp32: F0 errors turn into pitch errors.
* ``hift_decoder.onnx`` - (mel [1, 80, T], source_stft [1, 18, 120T+1]) -> (real, imag) [1, 9, 120T+1].
* ``hift_source.npz`` - ``weight`` [1, 9] and ``bias`` [1] of ``m_source.l_linear`` (used in numpy).

``hift.pt`` may spell weight norm as ``parametrizations.weight.original0/1`` or as ``weight_g/weight_v``
(with or without a ``generator.`` prefix); both load.
"""

from __future__ import annotations

import logging
from typing import Any

from cosyedge.errors import InputError
from cosyedge.export import read_source
from cosyedge.export.cosyvoice.common.upstream_config import section

logger = logging.getLogger(__name__)

F0_FILE = "hift_f0.onnx"
DECODER_FILE = "hift_decoder.onnx"
SOURCE_FILE = "hift_source.npz"
OPSET = 17


def hift_config(config: dict[str, Any]):
    """HiftConfig from the parsed yaml's ``hift`` section (24 kHz HiFTGenerator only)."""
    from cosyedge.export.cosyvoice.common.hift_nets import HiftConfig

    h = section(config, "hift")
    if not str(h.get("__class__", "")).endswith("HiFTGenerator"):
        raise InputError(f"hift class {h.get('__class__')!r} is not HiFTGenerator")
    f0 = section(config, "hift", "f0_predictor")
    istft_params = h.get("istft_params", {"n_fft": 16, "hop_len": 4})
    cfg = HiftConfig(
        in_channels=int(h.get("in_channels", 80)), base_channels=int(h.get("base_channels", 512)),
        nb_harmonics=int(h.get("nb_harmonics", 8)), sampling_rate=int(h.get("sampling_rate", 24000)),
        nsf_alpha=float(h.get("nsf_alpha", 0.1)), nsf_sigma=float(h.get("nsf_sigma", 0.003)),
        nsf_voiced_threshold=float(h.get("nsf_voiced_threshold", 10)),
        upsample_rates=tuple(h.get("upsample_rates", (8, 5, 3))),
        upsample_kernel_sizes=tuple(h.get("upsample_kernel_sizes", (16, 11, 7))),
        n_fft=int(istft_params["n_fft"]), hop_len=int(istft_params["hop_len"]),
        resblock_kernel_sizes=tuple(h.get("resblock_kernel_sizes", (3, 7, 11))),
        resblock_dilation_sizes=tuple(tuple(d) for d in h.get("resblock_dilation_sizes", [[1, 3, 5]] * 3)),
        source_resblock_kernel_sizes=tuple(h.get("source_resblock_kernel_sizes", (7, 7, 11))),
        source_resblock_dilation_sizes=tuple(
            tuple(d) for d in h.get("source_resblock_dilation_sizes", [[1, 3, 5]] * 3)),
        lrelu_slope=float(h.get("lrelu_slope", 0.1)), audio_limit=float(h.get("audio_limit", 0.99)),
        cond_channels=int(f0.get("cond_channels", 512)))
    if len(cfg.source_resblock_kernel_sizes) != len(cfg.upsample_rates):
        raise InputError("hift: one source resblock per upsample stage is required")
    return cfg


def split_state(folded: dict) -> tuple[dict, dict, dict]:
    """A weight-norm-folded ``hift.pt`` as (F0 predictor, ``m_source.l_linear``, decoder) weights,
    each with its own key prefix removed."""
    f0 = {k[len("f0_predictor."):]: v for k, v in folded.items() if k.startswith("f0_predictor.")}
    source = {k[len("m_source.l_linear."):]: v for k, v in folded.items() if k.startswith("m_source.")}
    decoder = {k: v for k, v in folded.items() if not k.startswith(("f0_predictor.", "m_source."))}
    return f0, source, decoder


def export_decoder(decoder, mel, cfg, path) -> None:
    """The decoder graph: (mel, source_stft) -> (real, imag), frames and STFT length dynamic."""
    import torch

    from cosyedge.export.cosyvoice.common.flow import quiet_export

    n_stft = mel.shape[2] * cfg.samples_per_frame // cfg.hop_len + 1
    with torch.no_grad(), quiet_export():
        torch.onnx.export(decoder, (mel, torch.randn(1, cfg.n_fft + 2, n_stft)), str(path),
                          input_names=["mel", "source_stft"], output_names=["real", "imag"],
                          dynamic_axes={"mel": {2: "n_frames"}, "source_stft": {2: "n_stft"},
                                        "real": {2: "n_stft"}, "imag": {2: "n_stft"}},
                          opset_version=OPSET, dynamo=False)


def save_source(ctx, source: dict) -> None:
    """``hift_source.npz``: the source module's linear layer, applied in numpy at run time."""
    import numpy as np

    np.savez(ctx.add_file(SOURCE_FILE, "HiFT source-module linear layer"),
             weight=source["weight"].numpy().astype(np.float32), bias=source["bias"].numpy().astype(np.float32))


def runtime_constants(cfg, f0_file: str = F0_FILE) -> dict[str, Any]:
    """The manifest's ``hift`` entries both HiFT kinds share (files, rates, source, STFT, clamp)."""
    return {"f0": f0_file, "decoder": DECODER_FILE, "source": SOURCE_FILE,
            "sampling_rate": cfg.sampling_rate, "samples_per_frame": cfg.samples_per_frame,
            "nb_harmonics": cfg.nb_harmonics, "nsf_alpha": cfg.nsf_alpha, "nsf_sigma": cfg.nsf_sigma,
            "nsf_voiced_threshold": cfg.nsf_voiced_threshold, "n_fft": cfg.n_fft, "hop_len": cfg.hop_len,
            "audio_limit": cfg.audio_limit}


def load_hift(state: dict, cfg):
    """Our F0Net and DecoderNet with ``hift.pt`` loaded strictly, plus the source-module weights."""
    from cosyedge.export.cosyvoice.common.hift_nets import DecoderNet, F0Net, fold_weight_norm

    f0_state, source, dec_state = split_state(fold_weight_norm(state))
    if set(source) != {"weight", "bias"}:
        raise InputError(f"hift.pt: expected m_source.l_linear.weight/bias, found {sorted(source)}")
    f0_net, decoder = F0Net(cfg).eval(), DecoderNet(cfg).eval()
    try:
        f0_net.load_state_dict(f0_state, strict=True)
        decoder.load_state_dict(dec_state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"hift.pt does not match the sizes in cosyvoice2.yaml: {exc}") from exc
    if tuple(source["weight"].shape) != (1, cfg.nb_harmonics + 1):
        raise InputError(f"hift.pt: m_source.l_linear.weight has shape {tuple(source['weight'].shape)}")
    return f0_net, decoder, source


def export_hift(ctx) -> None:
    """The "hift" export step (see module docstring)."""
    import torch

    from cosyedge.export.cosyvoice.common.flow import quiet_export
    from cosyedge.export.cosyvoice.common.quantize import quantize_in_place

    cfg = hift_config(ctx.config)
    state = read_source(ctx.source_file("hift.pt"),
                        lambda p: torch.load(p, map_location="cpu", weights_only=True))
    f0_net, decoder, source = load_hift(state, cfg)

    t = 20
    mel = torch.randn(1, cfg.in_channels, t)
    f0_path = ctx.add_file(F0_FILE, "HiFT F0 predictor")
    with torch.no_grad(), quiet_export():
        torch.onnx.export(f0_net, (mel,), str(f0_path), input_names=["mel"], output_names=["f0"],
                          dynamic_axes={"mel": {2: "n_frames"}, "f0": {1: "n_frames"}},
                          opset_version=OPSET, dynamo=False)
    export_decoder(decoder, mel, cfg, ctx.add_file(DECODER_FILE, "HiFT decoder network"))
    save_source(ctx, source)

    if ctx.quantize == "int8":
        quantize_in_place(ctx, F0_FILE)
        quantize_in_place(ctx, DECODER_FILE)

    ctx.runtime["hift"] = runtime_constants(cfg)
