"""Test-only access to the upstream CosyVoice PyTorch reference (PyPI ``cosyvoice-minicpmo``).

What it gives the parity tests:

* :func:`install_shim` - makes ``cosyvoice.*`` importable without torchaudio, hydra or lightning
  (must run before any ``cosyvoice`` import; idempotent).
* :func:`build_flow` / :func:`build_hift` - the upstream modules built from a size preset
  (``"tiny"`` for CI: same structure, tiny widths; ``"full"``: the CosyVoice2-0.5B yaml values), random
  weights, ``.eval()`` already called.
* :func:`write_model_dir` - writes ``flow.pt``, ``hift.pt`` and a ``cosyvoice2.yaml`` in the official
  layout, so the converter can be run on it exactly as on a downloaded checkpoint.
* :func:`to_legacy_weight_norm` - rewrites a HiFT state dict to the old ``weight_g``/``weight_v`` spelling.

The reference lives only in the dev/test environment (``scripts/install_reference.sh VENV``); nothing under
``cosyedge/`` imports this module.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import types
from pathlib import Path
from typing import Any

from tests.helpers import upstream_yaml

INSTALL_HINT = "install the reference with: scripts/install_reference.sh .venv"

#: Size presets. "full" repeats upstream cosyvoice2.yaml (commit 46dfe04). "tiny" keeps every structure
#: but shrinks what upstream lets us shrink: the flow encoder is hard-wired to 512 channels and 4 up-blocks,
#: so only its depth, FFN and heads shrink; estimator channels must be multiples of 8; HiFT base channels
#: must divide by 2**3.
PRESETS: dict[str, dict[str, Any]] = {
    "full": {
        "encoder": {"attention_heads": 8, "linear_units": 2048, "num_blocks": 6},
        "estimator": {"channels": [256], "attention_head_dim": 64, "n_blocks": 4, "num_mid_blocks": 12,
                      "num_heads": 8},
        "hift": {"base_channels": 512, "cond_channels": 512},
    },
    "tiny": {
        "encoder": {"attention_heads": 8, "linear_units": 64, "num_blocks": 1},
        "estimator": {"channels": [64], "attention_head_dim": 32, "n_blocks": 1, "num_mid_blocks": 2,
                      "num_heads": 2},
        "hift": {"base_channels": 32, "cond_channels": 32},
    },
}

_SHIM_DONE = False


def install_shim() -> None:
    """Make the upstream packages importable in a torchaudio-free, hydra-free environment.

    * ``matcha.utils`` pulls hydra/lightning/rich only to give ``BASECFM`` a logger: replace it by a stub.
    * ``cosyvoice.utils.file_utils`` imports torchaudio for a loader the tests never call: give it a stub
      only while it imports (a lingering stub breaks ``import transformers``).
    * ``file_utils`` calls ``logging.basicConfig(DEBUG)``: put the root logger back to WARNING.
    """
    global _SHIM_DONE
    if _SHIM_DONE:
        return
    try:
        import matcha
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - environment problem, not a test result
        raise ImportError(f"the CosyVoice reference is not installed ({exc}); {INSTALL_HINT}") from exc
    if "matcha.utils.pylogger" not in sys.modules:
        utils = types.ModuleType("matcha.utils")
        utils.__path__ = []  # a package, so submodule imports resolve to the stub below
        pylogger = types.ModuleType("matcha.utils.pylogger")
        pylogger.get_pylogger = lambda name=__name__: logging.getLogger(name)
        utils.pylogger = pylogger
        sys.modules["matcha.utils"] = utils
        sys.modules["matcha.utils.pylogger"] = pylogger
        matcha.utils = utils
    root_level = logging.getLogger().level
    had_torchaudio = "torchaudio" in sys.modules
    if not had_torchaudio:
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    try:
        importlib.import_module("cosyvoice.utils.file_utils")
    finally:
        if not had_torchaudio:
            del sys.modules["torchaudio"]
        logging.getLogger().setLevel(root_level)
    _SHIM_DONE = True


def _cfm_params():
    from omegaconf import DictConfig
    return DictConfig({"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine",
                       "training_cfg_rate": 0.2, "inference_cfg_rate": 0.7, "reg_loss_type": "l1"})


def build_flow(size: str = "tiny", seed: int = 0):
    """Upstream ``CausalMaskedDiffWithXvec`` with random weights (seeded), in eval mode.

    Note: constructing ``CausalConditionalCFM`` re-seeds torch/numpy/random with 0 (upstream side effect)
    and draws its fixed ``rand_noise`` [1, 80, 15000].
    """
    install_shim()
    import torch
    from cosyvoice.flow.decoder import CausalConditionalDecoder
    from cosyvoice.flow.flow import CausalMaskedDiffWithXvec
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.transformer.upsample_encoder import UpsampleConformerEncoder

    p = PRESETS[size]
    torch.manual_seed(seed)
    encoder = UpsampleConformerEncoder(
        input_size=512, output_size=512, dropout_rate=0.1, positional_dropout_rate=0.1,
        attention_dropout_rate=0.1, normalize_before=True, input_layer="linear",
        pos_enc_layer_type="rel_pos_espnet", selfattention_layer_type="rel_selfattn", use_cnn_module=False,
        macaron_style=False, static_chunk_size=25, **p["encoder"])
    estimator = CausalConditionalDecoder(
        in_channels=320, out_channels=80, dropout=0.0, act_fn="gelu", static_chunk_size=50,
        num_decoding_left_chunks=-1, **p["estimator"])
    cfm = CausalConditionalCFM(in_channels=240, cfm_params=_cfm_params(), n_spks=1, spk_emb_dim=80,
                               estimator=estimator)
    flow = CausalMaskedDiffWithXvec(
        input_size=512, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561,
        input_frame_rate=25, only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
        encoder=encoder, decoder=cfm)
    _randomize_norms(flow, seed)
    return flow.eval()


def build_hift(size: str = "tiny", seed: int = 0, f0_bias: float = 150.0, *, sizes: dict | None = None,
               sampling_rate: int = 24000, upsample_rates: tuple[int, ...] = (8, 5, 3),
               upsample_kernels: tuple[int, ...] = (16, 11, 7), source_kernels: tuple[int, ...] = (7, 7, 11)):
    """Upstream ``HiFTGenerator`` (24 kHz, ``ConvRNNF0Predictor``) with random weights, in eval mode.

    ``f0_bias`` is written into the F0 classifier bias so that random weights still give voiced frames
    (F0 above the 10 Hz threshold) and the sine source path is exercised; 0 keeps the random bias.
    ``sizes`` (default: the preset's) and the rates are CosyVoice-300M's in its builder
    (:func:`tests.helpers.cosyvoice1_reference.build_hift`).
    """
    install_shim()
    import torch
    from cosyvoice.hifigan.f0_predictor import ConvRNNF0Predictor
    from cosyvoice.hifigan.generator import HiFTGenerator

    p = sizes if sizes is not None else PRESETS[size]["hift"]
    torch.manual_seed(seed)
    hift = HiFTGenerator(
        in_channels=80, base_channels=p["base_channels"], nb_harmonics=8, sampling_rate=sampling_rate,
        nsf_alpha=0.1, nsf_sigma=0.003, nsf_voiced_threshold=10, upsample_rates=list(upsample_rates),
        upsample_kernel_sizes=list(upsample_kernels), istft_params={"n_fft": 16, "hop_len": 4},
        resblock_kernel_sizes=[3, 7, 11], resblock_dilation_sizes=[[1, 3, 5]] * 3,
        source_resblock_kernel_sizes=list(source_kernels),
        source_resblock_dilation_sizes=[[1, 3, 5]] * len(source_kernels), lrelu_slope=0.1, audio_limit=0.99,
        f0_predictor=ConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=p["cond_channels"]))
    with torch.no_grad():
        # Snake alphas start at exactly 1.0: perturb them so a wrong alpha mapping cannot pass.
        for name, param in hift.named_parameters():
            if name.endswith(".alpha"):
                param.mul_(1.0 + 0.2 * torch.rand_like(param))
        if f0_bias:
            hift.f0_predictor.classifier.bias.fill_(f0_bias)
    return hift.eval()


def _randomize_norms(module, seed: int) -> None:
    """LayerNorm weights start at 1/0: perturb them so a swapped or dropped norm is caught by parity."""
    import torch
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.LayerNorm) and sub.elementwise_affine:
                sub.weight.add_(0.1 * torch.randn(sub.weight.shape, generator=gen))
                sub.bias.add_(0.1 * torch.randn(sub.bias.shape, generator=gen))


def to_legacy_weight_norm(state: dict) -> dict:
    """Rewrite ``X.parametrizations.weight.original0/1`` keys as the old ``X.weight_g/weight_v`` spelling."""
    out = {}
    for key, value in state.items():
        if key.endswith(".parametrizations.weight.original0"):
            out[key[: -len(".parametrizations.weight.original0")] + ".weight_g"] = value
        elif key.endswith(".parametrizations.weight.original1"):
            out[key[: -len(".parametrizations.weight.original1")] + ".weight_v"] = value
        else:
            out[key] = value
    return out


def yaml_text(size: str = "tiny") -> str:
    """A ``cosyvoice2.yaml`` in the upstream hyperpyyaml dialect with the preset's sizes.

    Only the keys our converter reads plus the surrounding structure (the llm section is kept so the
    file looks like the official one; its LLM sizes are upstream's).
    """
    p = PRESETS[size]
    enc, est, hift = p["encoder"], p["estimator"], p["hift"]
    encoder = upstream_yaml.conformer_encoder("upsample_encoder.UpsampleConformerEncoder", 512,
                                              enc["attention_heads"], enc["linear_units"], enc["num_blocks"])
    return f"""\
# CosyVoice2 test config in the upstream hyperpyyaml layout (sizes from a preset).
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

{upstream_yaml.qwen2_rates(896)}\

{upstream_yaml.qwen2_llm("Qwen2LM")}
{upstream_yaml.causal_flow_head("CausalMaskedDiffWithXvec", 512)}\
{encoder}\
        static_chunk_size: !ref <chunk_size>
{upstream_yaml.cfm_decoder("CausalConditionalCFM")}\
{upstream_yaml.unet_estimator("CausalConditionalDecoder", est)}\
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

{upstream_yaml.hift("HiFTGenerator", hift["base_channels"], hift["cond_channels"], "ConvRNNF0Predictor")}
{upstream_yaml.feat_extractor(1920, 480, "8000")}"""


def write_model_dir(directory: Path, flow=None, hift=None, size: str = "tiny",
                    legacy_weight_norm: bool = False) -> Path:
    """Save modules in the official CosyVoice2 layout: ``flow.pt``, ``hift.pt``, ``cosyvoice2.yaml``."""
    import torch
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cosyvoice2.yaml").write_text(yaml_text(size), encoding="utf-8")
    if flow is not None:
        torch.save(flow.state_dict(), directory / "flow.pt")
    if hift is not None:
        state = hift.state_dict()
        if legacy_weight_norm:
            state = to_legacy_weight_norm(state)
        torch.save(state, directory / "hift.pt")
    return directory


@functools.lru_cache(maxsize=None)
def reference_noise():
    """Upstream's fixed CFM noise, drawn the same way as ``CausalConditionalCFM.__init__``."""
    import torch
    return torch.randn(1, 80, 15000, generator=torch.Generator().manual_seed(0))


def upstream_hift_capturing_noise(hift, mel):
    """Run upstream HiFT on ``mel`` [80, T] and capture the SineGen2 noise it draws (its first
    ``torch.randn_like``), so our numpy source can be fed the same noise.

    Returns (waveform, harmonic source, noise) as numpy arrays.
    """
    import torch

    captured = []
    real = torch.randn_like

    def recording(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        captured.append(out.clone())
        return out

    torch.randn_like = recording
    try:
        with torch.no_grad():
            wav, source = hift.inference(speech_feat=torch.from_numpy(mel)[None])
    finally:
        torch.randn_like = real
    return wav[0].numpy(), source[0, 0].numpy(), captured[0][0].numpy()


def matcha_mel_spectrogram():
    """Upstream's prompt-mel function (``matcha.utils.audio.mel_spectrogram``, torch + librosa).

    Loaded from its file because the shim replaces the ``matcha.utils`` package by a stub.
    """
    import importlib.util
    import matcha
    install_shim()
    path = Path(matcha.__file__).parent / "utils" / "audio.py"
    spec = importlib.util.spec_from_file_location("_reference_matcha_audio", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mel_spectrogram
