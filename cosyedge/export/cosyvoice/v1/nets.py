"""Our PyTorch re-statement of the CosyVoice-300M (v1) networks that differ from CosyVoice2, for export only.

What v1 has of its own, each in one place here:

* the speech LLM's causal Conformer text encoder (:class:`TextEncoder`), with
  :class:`CausalRelPosAttention`, which takes the positional projections ``linear_pos(pe(r))`` for the
  offsets ``r = 0 .. T-1`` as an input (they depend on nothing but the offset). The LLM's step graph
  itself is written directly with ``onnx.helper`` (:mod:`cosyedge.export.cosyvoice.v1.step_graph`),
  so that its cache is written in place; :func:`positional_weights` gives it the ``linear_pos`` rows;
* the flow front (``MaskedDiffWithXvec``): a non-causal Conformer encoder without upsampling
  (:class:`FlowFrontV1`) and the length regulator's convolutions (:class:`RegulatorConvs`; its
  interpolation to 22050 / 256 frames per second runs on the host, where the lengths are);
* the CFM estimator (``ConditionalDecoder``): a non-causal two-level U-Net with GroupNorm
  (:class:`EstimatorV1`).

What v1 shares with CosyVoice2 is imported from :mod:`cosyedge.export.cosyvoice.common.flow_nets` (Conformer layer, the
rel-pos attention's layers, relative sinusoids, transformer blocks with fused attention, Mish, time
embedding). Parameter names mirror the official ``llm.pt`` / ``flow.pt`` keys so the checkpoints load
with ``strict=True``.

This module imports torch at the top: only ``cosyedge.export.cosyvoice.v1.convert`` imports it, inside functions.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cosyedge.export.cosyvoice.common.flow_nets import (ConformerLayer, LinearEmbed, RelPosSelfAttention, TimeMLP,
                                       TransformerBlock, mish, relative_positions, timestep_features)

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Speech LLM
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LMConfig:
    """The v1 LLM's sizes (``llm`` section of ``cosyvoice.yaml``).

    ``input_size`` is ``llm_input_size`` (the width of the LLM's inputs: text affine, speaker affine,
    sos/task and speech embeddings), ``hidden`` the Transformer's ``output_size`` (its layers and
    the decoder head); upstream's ``linear_legacy`` input layer maps one to the other.
    """

    text_vocab: int = 51866
    text_input: int = 512
    text_hidden: int = 1024
    text_heads: int = 16
    text_units: int = 4096
    text_blocks: int = 6
    input_size: int = 1024
    hidden: int = 1024
    heads: int = 16
    units: int = 4096
    blocks: int = 14
    speech_vocab: int = 4096
    spk_embed_dim: int = 192

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def sinusoids(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """ESPnet sinusoids of ``positions`` [N] (float): [N, d_model], even channels sin, odd cos."""
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    angles = positions.to(torch.float32).unsqueeze(1) * div.unsqueeze(0)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(-1, d_model)


class CausalRelPosAttention(RelPosSelfAttention):
    """Rel-pos self-attention of queries at positions ``P .. P+L-1`` over a KV cache, causal.

    The layers (and so the ``llm.pt`` keys) are CosyVoice2's :class:`RelPosSelfAttention`; the
    forward pass differs. ``pos_proj`` [T, H*D] is ``linear_pos`` applied to the sinusoid of each
    offset ``r = 0 .. T-1`` (T = P + L); query i and key j score
    ``(q_i + u)·k_j + (q_i + v)·pos_proj[P + i - j]``, as upstream's ``rel_shift`` arranges for the
    prefill (P = 0) and for one-step decoding (L = 1).
    """

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor,
                pos_proj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, length, _ = x.shape
        q = self.linear_q(x).view(b, length, self.h, self.d_k)                       # [1, L, H, D]
        k = torch.cat([past_k, self.linear_k(x).view(b, length, self.h, self.d_k).transpose(1, 2)], dim=2)
        v = torch.cat([past_v, self.linear_v(x).view(b, length, self.h, self.d_k).transpose(1, 2)], dim=2)
        total = k.shape[2]
        past = total - length
        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))  # [1, H, L, T]
        p = pos_proj.view(total, self.h, self.d_k).permute(1, 2, 0)                   # [H, D, T] by offset
        by_offset = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p)            # [1, H, L, T]
        qpos = torch.arange(length).unsqueeze(1) + past
        kpos = torch.arange(total).unsqueeze(0)
        offset = qpos - kpos                                                           # [L, T]
        position = torch.gather(by_offset, 3, offset.clamp(min=0).expand(b, self.h, length, total))
        scores = (content + position) / math.sqrt(self.d_k)
        scores = scores.masked_fill(offset < 0, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, length, -1)
        return self.linear_out(out), k, v


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, activation) -> None:  # noqa: ANN001 - an activation fn
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class CausalLayer(nn.Module):
    """Pre-norm block: causal rel-pos attention, then FFN. Conformer (text encoder: ``norm_mha``/
    ``norm_ff``, SiLU) and Transformer (the LLM's layers, as the format-1 step graph ran them:
    ``norm1``/``norm2``, ReLU) differ only in names and activation."""

    def __init__(self, dim: int, heads: int, hidden: int, conformer: bool) -> None:
        super().__init__()
        self.conformer = conformer
        self.self_attn = CausalRelPosAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden, F.silu if conformer else F.relu)
        first, second = ("norm_mha", "norm_ff") if conformer else ("norm1", "norm2")
        setattr(self, first, nn.LayerNorm(dim, eps=1e-12))
        setattr(self, second, nn.LayerNorm(dim, eps=1e-12))
        self._norms = (first, second)

    def forward(self, x, past_k, past_v, pos_proj):  # noqa: ANN001 - graph signature
        norm_attn, norm_ff = (getattr(self, name) for name in self._norms)
        h, k, v = self.self_attn(norm_attn(x), past_k, past_v, pos_proj)
        x = x + h
        return x + self.feed_forward(norm_ff(x)), k, v


class TextEncoder(nn.Module):
    """Text embeddings [1, N, text_input] -> LLM inputs [1, N, input_size]: causal Conformer (chunk size 1)
    + affine.

    Holds the ``text_encoder.*`` and ``text_encoder_affine_layer.*`` keys of ``llm.pt`` (the text
    embedding table is gathered on the host).
    """

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.text_encoder = nn.Module()
        self.text_encoder.embed = LinearEmbed(cfg.text_input, cfg.text_hidden)
        self.text_encoder.encoders = nn.ModuleList(
            [CausalLayer(cfg.text_hidden, cfg.text_heads, cfg.text_units, conformer=True)
             for _ in range(cfg.text_blocks)])
        self.text_encoder.after_norm = nn.LayerNorm(cfg.text_hidden, eps=1e-5)
        self.text_encoder_affine_layer = nn.Linear(cfg.text_hidden, cfg.input_size)
        self.cfg = cfg

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        x = self.text_encoder.embed(embeds)
        n, heads = x.shape[1], self.cfg.text_heads
        pe = sinusoids(torch.arange(n), self.cfg.text_hidden)
        empty = x.new_zeros(1, heads, 0, self.cfg.text_hidden // heads)
        for layer in self.text_encoder.encoders:
            x, _, _ = layer(x, empty, empty, layer.self_attn.linear_pos(pe))
        return self.text_encoder_affine_layer(self.text_encoder.after_norm(x))


def positional_weights(state: dict, cfg: LMConfig) -> "torch.Tensor":
    """The LLM layers' ``linear_pos`` weights stacked: [blocks, H*D, H*D] (out, in)."""
    return torch.stack([state[f"llm.encoders.{i}.self_attn.linear_pos.weight"] for i in range(cfg.blocks)])


# ----------------------------------------------------------------------------------------------
# Flow
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FlowConfigV1:
    """The v1 flow's sizes (``flow`` section of ``cosyvoice.yaml``).

    ``input_size`` is the token embedding's width (the encoder's input), ``encoder_size`` the
    encoder's ``output_size`` (its layers; ``encoder_proj`` maps it to ``output_size``, the mel bins).
    """

    vocab_size: int = 4096
    input_size: int = 512
    encoder_size: int = 512
    output_size: int = 80
    spk_embed_dim: int = 192
    input_frame_rate: int = 50
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    regulator_stages: int = 4
    regulator_groups: int = 1
    est_in_channels: int = 320
    est_out_channels: int = 80
    est_channels: tuple[int, ...] = (256, 256)
    est_attention_head_dim: int = 64
    est_n_blocks: int = 4
    est_num_mid_blocks: int = 12
    est_num_heads: int = 8


class FlowFrontV1(nn.Module):
    """tokens [1, N] + speaker embedding [1, 192] -> h [1, N, 80] per token, spks [1, 80].

    Non-causal Conformer encoder (full attention; ``input_size`` in, ``encoder_size`` wide), projection
    to the 80 mel channels, and the L2-normalised speaker projection. Holds every non-estimator,
    non-regulator key of ``flow.pt``.
    """

    def __init__(self, cfg: FlowConfigV1) -> None:
        super().__init__()
        d = cfg.encoder_size
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = nn.Module()
        self.encoder.embed = LinearEmbed(cfg.input_size, d)
        self.encoder.encoders = nn.ModuleList([ConformerLayer(d, cfg.attention_heads, cfg.linear_units)
                                               for _ in range(cfg.num_blocks)])
        self.encoder.after_norm = nn.LayerNorm(d, eps=1e-5)
        self.encoder_proj = nn.Linear(d, cfg.output_size)
        self.d_model = d

    def forward(self, tokens: torch.Tensor, embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder.embed(self.input_embedding(torch.clamp(tokens, min=0)))
        pos = relative_positions(torch.tensor(x.shape[1]), self.d_model, x.dtype)
        for layer in self.encoder.encoders:
            x = layer(x, pos)
        h = self.encoder_proj(self.encoder.after_norm(x))
        spks = self.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        return h, spks


class RegulatorConvs(nn.Module):
    """The length regulator after its interpolation: [Conv1d k3, GroupNorm, Mish] x n, Conv1d 1x1.

    Holds the ``length_regulator.model.*`` keys (indices 0, 1 | 3, 4 | ... | 3n).
    """

    def __init__(self, channels: int = 80, stages: int = 4, groups: int = 1) -> None:
        super().__init__()
        layers: dict[str, nn.Module] = {}
        for s in range(stages):
            layers[str(3 * s)] = nn.Conv1d(channels, channels, 3, 1, 1)
            layers[str(3 * s + 1)] = nn.GroupNorm(groups, channels)
        layers[str(3 * stages)] = nn.Conv1d(channels, channels, 1)
        self.model = nn.ModuleDict(layers)
        self.stages = stages

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [1, 80, T] -> [1, 80, T]
        for s in range(self.stages):
            x = mish(self.model[str(3 * s + 1)](self.model[str(3 * s)](x)))
        return self.model[str(3 * self.stages)](x)


class Block(nn.Module):
    """Conv1d k3 (same padding) -> GroupNorm(8) -> Mish, channel-first (``Block1D``)."""

    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.block = nn.ModuleDict({"0": nn.Conv1d(dim, dim_out, 3, padding=1), "1": nn.GroupNorm(8, dim_out)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mish(self.block["1"](self.block["0"](x)))


class Resnet(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_dim: int) -> None:
        super().__init__()
        self.mlp = nn.ModuleDict({"1": nn.Linear(time_dim, dim_out)})
        self.block1 = Block(dim, dim_out)
        self.block2 = Block(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.block1(x) + self.mlp["1"](mish(temb)).unsqueeze(-1)
        return self.block2(h) + self.res_conv(x)


class StageV1(nn.ModuleList):
    """[resnet, transformer blocks(, resample conv)] with the official child indices."""

    def __init__(self, dim: int, dim_out: int, cfg: FlowConfigV1, time_dim: int, resample: nn.Module | None):
        children = [Resnet(dim, dim_out, time_dim),
                    nn.ModuleList([TransformerBlock(dim_out, cfg.est_num_heads, cfg.est_attention_head_dim)
                                   for _ in range(cfg.est_n_blocks)])]
        if resample is not None:
            children.append(resample)
        super().__init__(children)

    def trunk(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        """Resnet and transformer blocks (channel-first in and out)."""
        x = self[0](x, temb).transpose(1, 2)
        for block in self[1]:
            x = block(x)
        return x.transpose(1, 2)


class EstimatorV1(nn.Module):
    """(x, mu, t, spks, cond) -> velocity [B, 80, T]: upstream's ``ConditionalDecoder`` on unpadded input.

    Each level but the last halves the frames (Conv1d k3 stride 2, so ceil(T/2)); the way up doubles
    them (ConvTranspose1d k4 stride 2) and crops to the skip connection's length, as upstream does.
    With every frame valid, upstream's masks are ones and are left out.
    """

    def __init__(self, cfg: FlowConfigV1) -> None:
        super().__init__()
        channels = tuple(cfg.est_channels)
        time_dim = 4 * channels[0]
        self.in_channels = cfg.est_in_channels
        self.time_mlp = TimeMLP(cfg.est_in_channels, time_dim)
        self.down_blocks = nn.ModuleList()
        out = cfg.est_in_channels
        for i, ch in enumerate(channels):
            last = i == len(channels) - 1
            down = nn.Conv1d(ch, ch, 3, padding=1) if last else _Downsample(ch)
            self.down_blocks.append(StageV1(out, ch, cfg, time_dim, down))
            out = ch
        self.mid_blocks = nn.ModuleList([StageV1(channels[-1], channels[-1], cfg, time_dim, None)
                                         for _ in range(cfg.est_num_mid_blocks)])
        ups = channels[::-1] + (channels[0],)
        self.up_blocks = nn.ModuleList()
        for i in range(len(ups) - 1):
            last = i == len(ups) - 2
            up = nn.Conv1d(ups[i + 1], ups[i + 1], 3, padding=1) if last else _Upsample(ups[i + 1])
            self.up_blocks.append(StageV1(2 * ups[i], ups[i + 1], cfg, time_dim, up))
        self.final_block = Block(ups[-1], ups[-1])
        self.final_proj = nn.Conv1d(ups[-1], cfg.est_out_channels, 1)

    def forward(self, x, mu, t, spks, cond):  # noqa: ANN001 - ONNX graph signature
        temb = self.time_mlp(timestep_features(t, self.in_channels))
        h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1)
        skips = []
        for stage in self.down_blocks:
            h = stage.trunk(h, temb)
            skips.append(h)
            h = stage[2](h)
        for stage in self.mid_blocks:
            h = stage.trunk(h, temb)
        for stage in self.up_blocks:
            skip = skips.pop()
            h = stage.trunk(torch.cat([h[:, :, :skip.shape[-1]], skip], dim=1), temb)
            h = stage[2](h)
        return self.final_proj(self.final_block(h))


class _Downsample(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _Upsample(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(dim, dim, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)
