"""Our PyTorch re-statement of the CosyVoice3 flow and causal-HiFT networks, for export only.

Three graphs come from here (weights loaded strictly from the official ``flow.pt`` / ``hift.pt``):

* :class:`DiTFront` - tokens [1, N] + speaker embedding [1, 192] -> mu [1, 80, 2N], spks [1, 80]: the
  token embedding, the pre-lookahead layer (3 tokens of right context), ``repeat_interleave(2)`` and the
  L2-normalised speaker projection. CosyVoice3 has no Conformer encoder.
* :class:`DiTEstimator` - the CFM estimator (a DiT): (x, mu, t, spks, cond) -> velocity, same inputs as
  the CosyVoice2 estimator graph, so the run-time solver is shared. Unpadded input only (the runtime
  never pads), full attention. With ``chunk_frames`` (the streamed graph) the attention is upstream's
  ``streaming=True`` one: frame i sees the frames before the end of its 50-frame chunk, chunks counted
  from the first prompt frame (``add_optional_chunk_mask`` with ``static_chunk_size``, every left chunk).
  Upstream's rotary quirk is kept: the rotation is applied to q and k *before* the heads are split and
  covers the first ``dim_head`` channels only, so only head 0 is rotated; pairs are interleaved
  (x_transformers' ``rotate_half``).
* :class:`CausalDecoderNet` - the causal HiFT decoder: (mel, excitation STFT) -> (real, imag) spectrum.

The causal F0 predictor is not a graph: upstream runs it in float64, and so does the runtime (numpy,
``cosyedge.engines.cosyvoice.v3.causal_hift``) from the weights the converter saves.

This module imports torch at the top: only ``cosyedge.export.cosyvoice.v3.convert`` imports it, inside functions.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cosyedge.export.cosyvoice.common.flow_nets import FusedSelfAttention, mish
from cosyedge.export.cosyvoice.common.hift_nets import DecoderNet, HiftConfig, ResBlock

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiTConfig:
    """The CosyVoice3 flow hyperparameters the converter reads from ``cosyvoice3.yaml``."""

    vocab_size: int = 6561
    input_size: int = 80
    output_size: int = 80
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    lookahead_channels: int = 1024
    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    mel_dim: int = 80
    mu_dim: int = 80
    spk_dim: int = 80
    freq_embed_dim: int = 256
    conv_pos_kernel: int = 31
    conv_pos_groups: int = 16


class PreLookahead(nn.Module):
    """conv(k = lookahead + 1) over the next tokens, leaky ReLU, causal conv k3, residual (on [B, C, T])."""

    def __init__(self, channels: int, hidden: int, lookahead: int) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.conv1 = nn.Conv1d(channels, hidden, lookahead + 1)
        self.conv2 = nn.Conv1d(hidden, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.conv1(F.pad(x, (0, self.lookahead))))
        return self.conv2(F.pad(h, (2, 0))) + x


class DiTFront(nn.Module):
    """Token embedding + pre-lookahead + x2 repeat, and the speaker projection."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.pre_lookahead_layer = PreLookahead(cfg.input_size, cfg.lookahead_channels, cfg.pre_lookahead_len)

    def forward(self, tokens: torch.Tensor, embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.input_embedding(tokens).transpose(1, 2)                       # [1, 80, N]
        h = self.pre_lookahead_layer(h)
        mu = torch.repeat_interleave(h, self.cfg.token_mel_ratio, dim=2)      # [1, 80, 2N]
        spks = self.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        return mu, spks


class TimeEmbedding(nn.Module):
    """Sinusoidal embedding of t (x1000, sin then cos) -> Linear -> SiLU -> Linear."""

    def __init__(self, dim: int, freq_dim: int) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
        angle = 1000.0 * t[:, None] * freqs[None, :]
        return self.time_mlp(torch.cat([angle.sin(), angle.cos()], dim=-1))


class CausalPositionConv(nn.Module):
    """Two grouped, left-padded convolutions with Mish (upstream's causal conv position embedding)."""

    def __init__(self, dim: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel, groups=groups))
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel, groups=groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, T, D]
        h = x.transpose(1, 2)
        h = mish(self.conv1[0](F.pad(h, (self.kernel - 1, 0))))
        h = mish(self.conv2[0](F.pad(h, (self.kernel - 1, 0))))
        return h.transpose(1, 2)


class InputEmbedding(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.proj = nn.Linear(cfg.mel_dim * 2 + cfg.mu_dim + cfg.spk_dim, cfg.dim)
        self.conv_pos_embed = CausalPositionConv(cfg.dim, cfg.conv_pos_kernel, cfg.conv_pos_groups)

    def forward(self, x, cond, mu, spks) -> torch.Tensor:  # time-major inputs, spks [B, S]
        spks = spks[:, None, :].expand(-1, x.shape[1], -1)
        h = self.proj(torch.cat([x, cond, mu, spks], dim=-1))
        return self.conv_pos_embed(h) + h


class AdaNorm(nn.Module):
    """SiLU(t) -> Linear(dim -> n * dim): the modulation of upstream's AdaLayerNormZero(_Final)."""

    def __init__(self, dim: int, n: int) -> None:
        super().__init__()
        self.n = n
        self.linear = nn.Linear(dim, dim * n)

    def forward(self, temb: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.chunk(self.linear(F.silu(temb)), self.n, dim=1))


def layer_norm(x: torch.Tensor, dim: int) -> torch.Tensor:
    """LayerNorm without affine parameters, eps 1e-6 (``dim`` static for the exporter)."""
    return F.layer_norm(x, (dim,), eps=1e-6)


def rotate_first_head(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved-pair rotary embedding on the first ``cos.shape[-1]`` channels of [B, T, H*D]."""
    rot = cos.shape[-1]
    head, rest = x[..., :rot], x[..., rot:]
    pairs = head.reshape(*head.shape[:-1], rot // 2, 2)
    rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(head.shape)
    return torch.cat([head * cos + rotated * sin, rest], dim=-1)


def chunk_bias(n_frames: int | torch.Tensor, chunk_frames: int) -> torch.Tensor:
    """Additive attention bias [1, 1, T, T]: 0 where frame i may see frame j (j before the end of
    i's chunk), -inf elsewhere; upstream's ``subsequent_chunk_mask`` with every left chunk."""
    pos = torch.arange(n_frames)
    chunk_end = (torch.div(pos, chunk_frames, rounding_mode="floor") + 1) * chunk_frames
    seen = pos[None, :] < chunk_end[:, None]
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(seen, zero, zero - float("inf"))[None, None]


class BiasedSelfAttention(torch.autograd.Function):
    """Multi-head attention of [B, T, H*D] q/k/v with an additive bias [1, 1, T, T], exported as one
    ``com.microsoft.MultiHeadAttention`` node (its ``attention_bias`` input) like the unmasked one."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                heads: int) -> torch.Tensor:
        b, t, inner = q.shape
        d = inner // heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.reshape(b, t, heads, d).transpose(1, 2)

        scores = torch.matmul(split(q), split(k).transpose(-2, -1)) * (d ** -0.5) + bias
        out = torch.matmul(torch.softmax(scores, dim=-1), split(v))
        return out.transpose(1, 2).reshape(b, t, inner)

    @staticmethod
    def symbolic(g, q, k, v, bias, heads: int):  # torch.onnx symbolic signature: g is the graph context
        from torch.onnx.symbolic_helper import _optional_input_placeholder_tensor as absent

        out = g.op("com.microsoft::MultiHeadAttention", q, k, v, absent(g), absent(g), bias, num_heads_i=heads)
        out.setType(q.type())
        return out


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        q = rotate_first_head(self.to_q(x), cos, sin)
        k = rotate_first_head(self.to_k(x), cos, sin)
        if bias is None:
            return self.to_out[0](FusedSelfAttention.apply(q, k, self.to_v(x), self.heads))
        return self.to_out[0](BiasedSelfAttention.apply(q, k, self.to_v(x), bias, self.heads))


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, dim * mult)), nn.Identity(), nn.Linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff[2](F.gelu(self.ff[0][0](x), approximate="tanh"))


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.dim = cfg.dim
        self.attn_norm = AdaNorm(cfg.dim, 6)
        self.attn = Attention(cfg.dim, cfg.heads, cfg.dim_head)
        self.ff = FeedForward(cfg.dim, cfg.ff_mult)

    def forward(self, x, temb, cos, sin, bias=None) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.attn_norm(temb)
        h = layer_norm(x, self.dim) * (1 + scale_a[:, None]) + shift_a[:, None]
        x = x + gate_a[:, None] * self.attn(h, cos, sin, bias)
        h = layer_norm(x, self.dim) * (1 + scale_f[:, None]) + shift_f[:, None]
        return x + gate_f[:, None] * self.ff(h)


class RotaryTable(nn.Module):
    """cos/sin [T, dim_head] with interleaved pairs, from upstream's stored ``inv_freq``."""

    def __init__(self, dim_head: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim_head, 2).float() / dim_head)))

    def forward(self, n_frames: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(n_frames, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        freqs = torch.stack([freqs, freqs], dim=-1).reshape(freqs.shape[0], -1)
        return freqs.cos(), freqs.sin()


class DiTEstimator(nn.Module):
    """Upstream ``DiT.forward`` for unpadded input (mask all ones): ``streaming=False``, or with
    ``chunk_frames`` > 0 ``streaming=True`` (chunk-causal attention, :func:`chunk_bias`)."""

    def __init__(self, cfg: DiTConfig, chunk_frames: int = 0) -> None:
        super().__init__()
        self.chunk_frames = chunk_frames
        self.dim = cfg.dim
        self.time_embed = TimeEmbedding(cfg.dim, cfg.freq_embed_dim)
        self.input_embed = InputEmbedding(cfg)
        self.rotary_embed = RotaryTable(cfg.dim_head)
        self.transformer_blocks = nn.ModuleList([DiTBlock(cfg) for _ in range(cfg.depth)])
        self.norm_out = AdaNorm(cfg.dim, 2)
        self.proj_out = nn.Linear(cfg.dim, cfg.mel_dim)

    def forward(self, x, mu, t, spks, cond) -> torch.Tensor:
        x, mu, cond = x.transpose(1, 2), mu.transpose(1, 2), cond.transpose(1, 2)
        temb = self.time_embed(t)
        h = self.input_embed(x, cond, mu, spks)
        cos, sin = self.rotary_embed(x.shape[1])
        bias = chunk_bias(x.shape[1], self.chunk_frames) if self.chunk_frames else None
        for block in self.transformer_blocks:
            h = block(h, temb, cos, sin, bias)
        scale, shift = self.norm_out(temb)
        h = layer_norm(h, self.dim) * (1 + scale)[:, None, :] + shift[:, None, :]
        return self.proj_out(h).transpose(1, 2)


class DiTChunkStep(nn.Module):
    """One chunk of upstream's streamed DiT from per-step caches: (x, mu, t, spks, cond [B, 80, L],
    offset [1], conv [2, B, K-1, dim], key_0, value_0, ...) -> (velocity [B, 80, L], kv_out_0, ...
    [2, B, heads, L, dim_head], conv_out).

    With chunk-causal attention the chunk's frames see every earlier chunk and the whole chunk, so the
    chunk's output needs of the past only each layer's keys/values (``key_i``/``value_i``
    [C, B, heads, F, dim_head]: the C earlier chunks as the runtime's
    :class:`~cosyedge.engines.cosyvoice.common.flow_cache.BlockedStepCache` holds them, rotated at their
    absolute positions) and the causal position convolutions' last ``K - 1`` inputs (``conv``). The
    rotary positions start at ``offset``, the chunk's first frame counted from the first prompt frame.
    The same arithmetic as :class:`DiTEstimator` with ``chunk_frames``; the attention is the CosyVoice2
    chunk step's (``chunk_attention``).
    """

    def __init__(self, estimator: DiTEstimator, kv_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.est = estimator
        self.kv_dtype = kv_dtype

    def _position_conv(self, h: torch.Tensor, conv: torch.Tensor, tails: list) -> torch.Tensor:
        pos = self.est.input_embed.conv_pos_embed
        y = h.transpose(1, 2)
        for i, layer in enumerate((pos.conv1[0], pos.conv2[0])):
            padded = torch.cat([conv[i].transpose(1, 2), y], dim=2)          # [B, dim, K-1 + L]
            tails.append(padded[:, :, -(pos.kernel - 1):].transpose(1, 2))
            y = mish(layer(padded))
        return y.transpose(1, 2)

    def forward(self, x, mu, t, spks, cond, offset, conv, *kv):  # noqa: ANN001 - ONNX graph signature
        from cosyedge.export.cosyvoice.common.flow_stream_nets import chunk_attention

        est = self.est
        x, mu, cond = x.transpose(1, 2), mu.transpose(1, 2), cond.transpose(1, 2)
        temb = est.time_embed(t)
        inp = est.input_embed
        spk = spks[:, None, :].expand(-1, x.shape[1], -1)
        h = inp.proj(torch.cat([x, cond, mu, spk], dim=-1))
        tails: list = []
        h = self._position_conv(h, conv, tails) + h
        pos = offset.to(torch.float32) + torch.arange(x.shape[1], dtype=torch.float32)
        freqs = pos[:, None] * est.rotary_embed.inv_freq[None, :]
        freqs = torch.stack([freqs, freqs], dim=-1).reshape(freqs.shape[0], -1)
        cos, sin = freqs.cos(), freqs.sin()
        shares = []
        b, length = h.shape[0], h.shape[1]
        for i, block in enumerate(est.transformer_blocks):
            shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = block.attn_norm(temb)
            a = layer_norm(h, block.dim) * (1 + scale_a[:, None]) + shift_a[:, None]
            attn = block.attn
            heads, dim_head = attn.heads, attn.to_q.out_features // attn.heads

            def split(y: torch.Tensor) -> torch.Tensor:
                return y.reshape(b, length, heads, dim_head).transpose(1, 2)

            q = split(rotate_first_head(attn.to_q(a), cos, sin)) * (dim_head ** -0.5)
            k, v = split(rotate_first_head(attn.to_k(a), cos, sin)), split(attn.to_v(a))
            shares.append(torch.stack([k, v]).to(self.kv_dtype))
            out = chunk_attention(q, k, v, kv[2 * i].to(torch.float32), kv[2 * i + 1].to(torch.float32))
            h = h + gate_a[:, None] * attn.to_out[0](out.transpose(1, 2).reshape(b, length, heads * dim_head))
            f = layer_norm(h, block.dim) * (1 + scale_f[:, None]) + shift_f[:, None]
            h = h + gate_f[:, None] * block.ff(f)
        scale, shift = est.norm_out(temb)
        h = layer_norm(h, est.dim) * (1 + scale)[:, None, :] + shift[:, None, :]
        return (est.proj_out(h).transpose(1, 2), *shares, torch.stack(tails))


# ----------------------------------------------------------------------------------------------
# Causal HiFT
# ----------------------------------------------------------------------------------------------

class CausalConv(nn.Conv1d):
    """Conv1d padded with zeros on the left (``right=False``) or right, keeping the length."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, right: bool = False,
                 stride: int = 1, pad: int | None = None) -> None:
        super().__init__(cin, cout, kernel, stride=stride, dilation=dilation)
        self.pad = (kernel - 1) * dilation if pad is None else pad
        self.right = right

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (0, self.pad) if self.right else (self.pad, 0)))


class CausalResBlock(ResBlock):
    @staticmethod
    def conv(channels: int, kernel: int, dilation: int) -> nn.Module:
        return CausalConv(channels, channels, kernel, dilation)


class CausalDecoderNet(DecoderNet):
    """mel + excitation spectrum -> (real, imag) spectrum, causal HiFT layout (``conv_pre`` looks
    ``look_right`` frames ahead; each upsampling repeats frames, then a causal conv)."""

    resblock = CausalResBlock

    def __init__(self, cfg: HiftConfig, look_right: int = 4) -> None:
        self.look_right = look_right  # read by _pre, during DecoderNet.__init__
        super().__init__(cfg)

    def _pre(self, cin: int, cout: int) -> nn.Module:
        return CausalConv(cin, cout, self.look_right + 1, right=True, pad=self.look_right)

    @staticmethod
    def _up(cin: int, cout: int, kernel: int, rate: int) -> nn.Module:
        return CausalConv(cin, cout, kernel)  # weight keys keep upstream's names: ``ups.i`` is the conv

    @staticmethod
    def _source_down(n_bins: int, channels: int, stride: int) -> nn.Module:
        if stride == 1:
            return CausalConv(n_bins, channels, 1)
        return CausalConv(n_bins, channels, 2 * stride, stride=stride, pad=stride - 1)

    @staticmethod
    def _post(cin: int, cout: int) -> nn.Module:
        return CausalConv(cin, cout, 7)

    def upsample(self, i: int, x: torch.Tensor) -> torch.Tensor:
        rate = self.cfg.upsample_rates[i]
        return self.ups[i](torch.repeat_interleave(F.leaky_relu(x, self.cfg.lrelu_slope), rate, dim=2))
