"""Our PyTorch re-statement of the CosyVoice2 HiFT vocoder networks, for export only.

Two graphs come from here:

* :class:`F0Net` - mel [1, 80, T] -> F0 in Hz [1, T] (the ``f0_predictor.*`` keys).
* :class:`DecoderNet` - mel [1, 80, T] + STFT of the excitation [1, 18, 120T+1] -> real and imaginary
  spectrum [1, 9, 120T+1] for the inverse STFT (everything else except ``m_source``).

Weight norm is folded into plain weights at load time (:func:`fold_weight_norm`), so the graphs carry one
weight per conv. The harmonic source, STFT and ISTFT run in numpy at run time: they hold the only random
numbers and ONNX has no inverse-STFT operator.

This module imports torch at the top: only ``cosyedge.export.cosyvoice.common.hift`` imports it, inside functions.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

_WN_SPELLINGS = (
    (".parametrizations.weight.original0", ".parametrizations.weight.original1"),  # torch >= 2.1
    (".weight_g", ".weight_v"),                                                     # legacy weight_norm
)


@dataclass(frozen=True)
class HiftConfig:
    """The HiFT hyperparameters the converter reads from ``cosyvoice2.yaml``."""

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5),) * 3
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5),) * 3
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    cond_channels: int = 512

    @property
    def samples_per_frame(self) -> int:
        total = self.hop_len
        for rate in self.upsample_rates:
            total *= rate
        return total


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace every (g, v) weight-norm pair by the weight it stands for: ``g * v / ||v||``.

    Accepts both spellings found in released checkpoints and strips upstream's optional ``generator.``
    prefix. The norm runs over all dimensions except 0 (Conv1d: out channels; ConvTranspose1d: in).
    """
    state = {(k[len("generator."):] if k.startswith("generator.") else k): v for k, v in state.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        for g_suffix, v_suffix in _WN_SPELLINGS:
            if key.endswith(g_suffix):
                stem = key[: -len(g_suffix)]
                v = state[stem + v_suffix].double()
                norm = v.pow(2).sum(dim=tuple(range(1, v.dim())), keepdim=True).sqrt()
                out[stem + ".weight"] = (value.double() * v / norm).float()
                break
            if key.endswith(v_suffix):
                break
        else:
            out[key] = value
    return out


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha, per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.view(1, -1, 1)
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha) ** 2


class ResBlock(nn.Module):
    """Snake -> dilated conv -> Snake -> conv, residual, once per dilation (``conv`` keeps the length)."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList([self.conv(channels, kernel, d) for d in dilations])
        self.convs2 = nn.ModuleList([self.conv(channels, kernel, 1) for _ in dilations])
        self.activations1 = nn.ModuleList([Snake(channels) for _ in dilations])
        self.activations2 = nn.ModuleList([Snake(channels) for _ in dilations])

    @staticmethod
    def conv(channels: int, kernel: int, dilation: int) -> nn.Module:
        """Padded on both sides (non-causal)."""
        return nn.Conv1d(channels, channels, kernel, dilation=dilation, padding=(kernel * dilation - dilation) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = x + c2(a2(c1(a1(x))))
        return x


class F0Net(nn.Module):
    """Five conv(k3)+ELU layers, a linear head, absolute value: mel [1, 80, T] -> F0 [1, T]."""

    def __init__(self, cfg: HiftConfig) -> None:
        super().__init__()
        layers: dict[str, nn.Module] = {}
        channels = cfg.in_channels
        for i in range(5):
            layers[str(2 * i)] = nn.Conv1d(channels, cfg.cond_channels, 3, padding=1)
            channels = cfg.cond_channels
        self.condnet = nn.ModuleDict(layers)
        self.classifier = nn.Linear(cfg.cond_channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = mel
        for conv in self.condnet.values():
            x = F.elu(conv(x))
        return torch.abs(self.classifier(x.transpose(1, 2)).squeeze(-1))


class DecoderNet(nn.Module):
    """mel + excitation spectrum -> (real, imag) spectrum of the waveform, magnitude clipped at 100.

    The layout (upsample stages, a source branch meeting each, multi-kernel resblocks) is shared
    with CosyVoice3's causal decoder, which overrides the convolutions (``_pre``, ``_up``,
    ``_source_down``, ``_post``, ``resblock``) and the upsampling step (``upsample``).
    """

    resblock = ResBlock

    def __init__(self, cfg: HiftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        base = cfg.base_channels
        n_bins = cfg.n_fft + 2
        self.conv_pre = self._pre(cfg.in_channels, base)
        self.ups = nn.ModuleList([self._up(base // 2 ** i, base // 2 ** (i + 1), k, u)
                                  for i, (u, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes))])
        # Source branch i meets the decoder after upsample stage i: downsample the excitation STFT by
        # the product of the remaining upsample rates.
        rates = list(cfg.upsample_rates)
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i, (k, d) in enumerate(zip(cfg.source_resblock_kernel_sizes, cfg.source_resblock_dilation_sizes)):
            ch = base // 2 ** (i + 1)
            self.source_downs.append(self._source_down(n_bins, ch, math.prod(rates[i + 1:])))
            self.source_resblocks.append(self.resblock(ch, k, tuple(d)))
        self.resblocks = nn.ModuleList()
        for i in range(len(rates)):
            ch = base // 2 ** (i + 1)
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes):
                self.resblocks.append(self.resblock(ch, k, tuple(d)))
        self.conv_post = self._post(ch, n_bins)
        self.num_kernels = len(cfg.resblock_kernel_sizes)

    @staticmethod
    def _pre(cin: int, cout: int) -> nn.Module:
        return nn.Conv1d(cin, cout, 7, padding=3)

    @staticmethod
    def _up(cin: int, cout: int, kernel: int, rate: int) -> nn.Module:
        return nn.ConvTranspose1d(cin, cout, kernel, rate, padding=(kernel - rate) // 2)

    @staticmethod
    def _source_down(n_bins: int, channels: int, stride: int) -> nn.Module:
        if stride == 1:
            return nn.Conv1d(n_bins, channels, 1)
        return nn.Conv1d(n_bins, channels, 2 * stride, stride, padding=stride // 2)

    @staticmethod
    def _post(cin: int, cout: int) -> nn.Module:
        return nn.Conv1d(cin, cout, 7, padding=3)

    def upsample(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return self.ups[i](F.leaky_relu(x, self.cfg.lrelu_slope))

    def forward(self, mel: torch.Tensor, source_stft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv_pre(mel)
        last = len(self.ups) - 1
        for i in range(len(self.ups)):
            x = self.upsample(i, x)
            if i == last:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](source_stft))
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            acc = blocks[0](x)
            for block in blocks[1:]:
                acc = acc + block(x)
            x = acc / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        half = self.cfg.n_fft // 2 + 1
        magnitude = torch.clamp(torch.exp(x[:, :half]), max=1e2)
        phase = torch.sin(x[:, half:])
        return magnitude * torch.cos(phase), magnitude * torch.sin(phase)
