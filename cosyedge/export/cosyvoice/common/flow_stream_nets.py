"""Chunk-at-a-time forms of the CosyVoice2 flow, for export only: the encoder front and the CFM
estimator as one step over a new chunk, with every earlier chunk's state passed in as caches.

Upstream's ``streaming=True`` flow is chunk-causal: the encoder attends within its 25-token chunk and
to every earlier chunk, the estimator likewise with 50-frame chunks, and the convolutions look back
a fixed number of frames. So the output for a new chunk depends on the past only through

* per attention layer: the keys and values of the earlier positions (per Euler step, for the
  estimator, since every step sees different hidden states);
* per causal convolution: its last ``kernel - 1`` input frames (the "tail").

The step modules below take those caches and return the new chunk's share, so the runtime appends and
never recomputes a prefix. They reuse the weights of :mod:`cosyedge.export.cosyvoice.common.flow_nets`'s modules (the
same ``flow.pt`` keys), and one step call covers exactly one chunk (no attention mask is needed: every
cached position is visible, and attention is two-way inside a chunk).

Cache layouts (the earlier positions first, so the runtime's prefix of a preallocated buffer is one
contiguous slice that onnxruntime reads in place):

* encoder: ``kv_down [P, down_layers, 2, 1, D]`` (token positions), ``kv_up [2P, up_layers, 2, 1, D]``
  (frame positions), ``pre_tail [1, 2, D]`` (the pre-lookahead's second conv input),
  ``up_tail [1, 2, D]`` (the two tokens before the chunk, ahead of the x2 upsampling conv);
* estimator: per attention layer ``key_i`` / ``value_i [C, B, heads, F, head_dim]`` (C earlier chunks
  of F = 50 frames: chunk-major, so a prefix is contiguous, and heads-major inside a chunk, the layout
  the products read: :func:`chunk_attention`), ``conv [conv_layers, B, 2, max_channels]``. The
  estimator's cache is ~99 % of a stream's memory and is read by every call: it is the one read
  without a gather, transpose or concatenation (the first streaming converter's single packed
  ``kv [P, layers, 2, B, inner]`` input was unpacked in every layer: 52-60 % of a call).

This module imports torch at the top: only ``cosyedge.export.cosyvoice.common.flow`` imports it, inside functions.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from cosyedge.export.cosyvoice.common.flow_nets import (CausalBlock, CausalConv, CausalResnet, Estimator, FlowFront,
                                       RelPosSelfAttention, Stage, mish, pointwise, timestep_features)

logger = logging.getLogger(__name__)

CONV_TAIL = 2  # every causal conv of the CosyVoice2 flow has kernel 3 (upsampling: 2 tokens = 4 frames)


def position_table(first, count, d_model: int, dtype: torch.dtype) -> torch.Tensor:  # noqa: ANN001
    """ESPnet relative sinusoids for positions ``first, first-1, ...`` (``count`` rows): [1, count, d].

    ``first`` and ``count`` are sizes read off tensors, so the exported graph keeps them dynamic.
    """
    pos = first - torch.arange(0, count, dtype=torch.float32)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    angles = pos.unsqueeze(1) * div.unsqueeze(0)
    table = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(-1, d_model)
    return table.unsqueeze(0).to(dtype)


def cached_rel_attention(attn: RelPosSelfAttention, x: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rel-pos attention of the chunk ``x`` [1, Lq, D] over cache + chunk; returns (out, k_new, v_new).

    Query ``r`` (absolute ``P + r``) and key ``j`` are ``P + r - j`` apart; the table lists positions
    ``Lk - 1`` down to ``-(Lq - 1)``, so that offset sits in column ``Lq - 1 - r + j``.
    """
    b, lq, _ = x.shape
    k_new, v_new = attn.linear_k(x), attn.linear_v(x)
    k_all = torch.cat([k_cache, k_new], dim=1)
    v_all = torch.cat([v_cache, v_new], dim=1)
    lk = k_all.shape[1]
    q = attn._heads(attn.linear_q(x))                                        # [B, Lq, H, Dk]
    k = attn._heads(k_all).transpose(1, 2)
    v = attn._heads(v_all).transpose(1, 2)
    table = position_table(lk - 1, lk + lq - 1, x.shape[-1], x.dtype)
    p = attn._heads(attn.linear_pos(table)).transpose(1, 2)                  # [1, H, Lk+Lq-1, Dk]
    content = torch.matmul((q + attn.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
    position = torch.matmul((q + attn.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
    rows = torch.arange(lq).unsqueeze(1)
    cols = torch.arange(lk).unsqueeze(0)
    index = (lq - 1 - rows + cols).unsqueeze(0).unsqueeze(0).expand(b, attn.h, lq, lk)
    position = torch.gather(position, 3, index)
    scores = (content + position) / math.sqrt(attn.d_k)
    out = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, lq, attn.h * attn.d_k)
    return attn.linear_out(out), k_new, v_new


class EncoderStep(nn.Module):
    """One encoder chunk: (tokens [1, L], context [1, 3], n_context [1], embedding [1, 192], caches)
    -> (mu [1, 80, 2L], spks [1, 80], new cache shares).

    ``context`` holds the look-ahead tokens after the chunk; only the first ``n_context`` are real (the
    rest stand for upstream's zero padding at the end of the utterance).
    """

    def __init__(self, front: FlowFront) -> None:
        super().__init__()
        self.front = front

    def forward(self, tokens, context, n_context, embedding, pre_tail, kv_down, up_tail, kv_up):  # noqa: ANN001
        front, enc = self.front, self.front.encoder
        lookahead = enc.pre_lookahead_layer
        x = enc.embed(front.input_embedding(torch.clamp(tokens, min=0)))               # [1, L, D]
        ctx = enc.embed(front.input_embedding(torch.clamp(context, min=0)))
        real = (torch.arange(lookahead.lookahead) < n_context).to(x.dtype)
        ctx = ctx * real.unsqueeze(0).unsqueeze(-1)
        h = F.leaky_relu(lookahead.conv1(torch.cat([x, ctx], dim=1).transpose(1, 2)))   # [1, D, L]
        h = torch.cat([pre_tail.transpose(1, 2), h], dim=2)
        pre_tail_new = h[:, :, -CONV_TAIL:].transpose(1, 2)
        x = lookahead.conv2(h).transpose(1, 2) + x
        down_new = []
        for i, layer in enumerate(enc.encoders):
            x, k_new, v_new = _cached_conformer(layer, x, kv_down[:, i, 0].transpose(0, 1),
                                                kv_down[:, i, 1].transpose(0, 1))
            down_new.append(torch.stack([k_new, v_new]))                               # [2, 1, L, D]
        up_in = torch.cat([up_tail, x], dim=1)                                          # [1, L+2, D]
        up_tail_new = up_in[:, -CONV_TAIL:]
        x = enc.up_layer.conv(torch.repeat_interleave(up_in, 2, dim=1).transpose(1, 2)).transpose(1, 2)
        x = enc.up_embed(x)
        up_new = []
        for i, layer in enumerate(enc.up_encoders):
            x, k_new, v_new = _cached_conformer(layer, x, kv_up[:, i, 0].transpose(0, 1),
                                                kv_up[:, i, 1].transpose(0, 1))
            up_new.append(torch.stack([k_new, v_new]))
        mu = front.encoder_proj(enc.after_norm(x)).transpose(1, 2)
        spks = front.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        # [layers, 2, 1, T, D] -> time first, as the caches
        kv_down_new = torch.stack(down_new).permute(3, 0, 1, 2, 4)
        kv_up_new = torch.stack(up_new).permute(3, 0, 1, 2, 4)
        return mu, spks, pre_tail_new, kv_down_new, up_tail_new, kv_up_new


def _cached_conformer(layer, x, k_cache, v_cache):  # noqa: ANN001, ANN202 - mirrors ConformerLayer.forward
    out, k_new, v_new = cached_rel_attention(layer.self_attn, layer.norm_mha(x), k_cache, v_cache)
    x = x + out
    return x + layer.feed_forward(layer.norm_ff(x)), k_new, v_new


class StepCaches:
    """Hands an estimator step's modules their cache inputs in order and collects what they add.

    The causal convolutions' tails are the same in every layout; how an attention layer reads its
    keys/values is the subclass's (:class:`ChunkCaches` here; the first streaming converter's
    frame-packed form is kept in the tests, for models converted with it).
    """

    def __init__(self, conv: torch.Tensor) -> None:
        self.conv = conv
        self.kv_new: list[torch.Tensor] = []
        self.conv_new: list[torch.Tensor] = []

    def conv_step(self, conv: CausalConv, x: torch.Tensor) -> torch.Tensor:
        tail = self.conv[len(self.conv_new), :, :, :x.shape[-1]]                    # [B, 2, C]
        padded = torch.cat([tail, x], dim=1)
        self.conv_new.append(F.pad(padded[:, -CONV_TAIL:], (0, self.conv.shape[-1] - x.shape[-1])))
        k, t = conv.kernel_size[0], x.shape[1]
        cols = torch.cat([padded[:, i:i + t] for i in range(k)], dim=-1)
        weight = conv.weight.permute(0, 2, 1).reshape(conv.out_channels, -1)
        return F.linear(cols, weight, conv.bias)

    def attention_step(self, attn, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        raise NotImplementedError


def chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_past: torch.Tensor,
                    v_past: torch.Tensor) -> torch.Tensor:
    """Softmax attention of the chunk's queries over the earlier chunks' keys/values and its own.

    ``q``/``k``/``v`` [B, H, L, D] (``q`` already scaled), ``k_past``/``v_past`` [C, B, H, F, D]: C earlier
    chunks of F frames each, as the runtime stores them (a prefix of its buffer, never copied). The
    softmax over all C*F + L keys is taken in parts, with one maximum and one sum over both, so no
    score or key is rearranged; with C = 0 the past terms are empty (their max is -inf, their sums 0).
    """
    s_past = torch.matmul(q.unsqueeze(0), k_past.transpose(-2, -1))                   # [C, B, H, L, F]
    s_new = torch.matmul(q, k.transpose(-2, -1))                                      # [B, H, L, L]
    top = torch.maximum(s_past.amax(dim=-1, keepdim=True).amax(dim=0), s_new.amax(dim=-1, keepdim=True))
    e_past, e_new = torch.exp(s_past - top), torch.exp(s_new - top)
    total = e_past.sum(dim=-1, keepdim=True).sum(dim=0) + e_new.sum(dim=-1, keepdim=True)
    weighted = torch.matmul(e_past, v_past)                                           # [C, B, H, L, D]
    # The sum over the C chunks as one product with a row of ones: onnxruntime's ReduceSum over a
    # leading axis took ~13 % of the attention's time, the product a third of that (docs/benchmarks.md).
    # (Flatten, not a reshape to [C, -1]: that has no answer for C = 0.)
    past = torch.matmul(torch.ones(1, weighted.shape[0], dtype=weighted.dtype), torch.flatten(weighted, 1))
    return (past.reshape(q.shape) + torch.matmul(e_new, v)) / total


class ChunkCaches(StepCaches):
    """Per attention layer a key and a value input ``[C, B, heads, F, head_dim]``: the C earlier
    chunks (F frames each) in the layout the products read, in the cache's dtype (float16 in int8
    models: one cast per layer and call is the only copy). A chunk's share goes out per layer,
    ``kv_out_i [2, B, heads, L, head_dim]`` (one output for all layers was a 11.5 MB concatenation
    and cast per call at full size)."""

    def __init__(self, keys, values, conv: torch.Tensor) -> None:  # noqa: ANN001 - tuples of tensors
        super().__init__(conv)
        self.keys, self.values = keys, values

    def attention_step(self, attn, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        index = len(self.kv_new)
        b, length = x.shape[0], x.shape[1]

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.reshape(b, length, attn.heads, attn.head_dim).transpose(1, 2)

        q = heads(attn.to_q(x)) * (attn.head_dim ** -0.5)
        k, v = heads(attn.to_k(x)), heads(attn.to_v(x))
        self.kv_new.append(torch.stack([k, v]))                                       # [2, B, H, L, D]
        out = chunk_attention(q, k, v, self.keys[index].to(torch.float32), self.values[index].to(torch.float32))
        return attn.to_out[0](out.transpose(1, 2).reshape(b, length, attn.heads * attn.head_dim))


def _block(caches: StepCaches, block: CausalBlock, x: torch.Tensor) -> torch.Tensor:
    return mish(block.block["2"](caches.conv_step(block.block["0"], x)))


def _resnet(caches: StepCaches, resnet: CausalResnet, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
    h = _block(caches, resnet.block1, x) + resnet.mlp["1"](mish(temb)).unsqueeze(1)
    return _block(caches, resnet.block2, h) + pointwise(resnet.res_conv, x)


def _stage(caches: StepCaches, stage: Stage, x: torch.Tensor, temb: torch.Tensor, conv: bool = True) -> torch.Tensor:
    x = _resnet(caches, stage[0], x, temb)
    for block in stage[1]:
        x = x + caches.attention_step(block.attn1, block.norm1(x))
        x = x + block.ff(block.norm3(x))
    if conv and len(stage) > 2:
        x = caches.conv_step(stage[2], x)
    return x


def estimator_step(caches: StepCaches, est: Estimator, x, mu, t, spks, cond) -> torch.Tensor:  # noqa: ANN001
    """The estimator's forward pass over one chunk, reading and filling ``caches``: velocity [B, 80, L]."""
    temb = est.time_mlp(timestep_features(t, est.in_channels))
    h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1).transpose(1, 2)
    skip = _stage(caches, est.down_blocks[0], h, temb, conv=False)
    h = caches.conv_step(est.down_blocks[0][2], skip)
    for stage in est.mid_blocks:
        h = _stage(caches, stage, h, temb)
    h = _stage(caches, est.up_blocks[0], torch.cat([h, skip], dim=-1), temb)
    return pointwise(est.final_proj, _block(caches, est.final_block, h)).transpose(1, 2)


class EstimatorStep(nn.Module):
    """One estimator chunk: (x, mu, t, spks, cond, conv, key_0, value_0, key_1, ...) -> (velocity
    [B, 80, L], kv_out_0, kv_out_1, ... [2, B, heads, L, head_dim], conv tails).

    ``kv_dtype`` float16 stores the key/value cache at half size (4.6 MB per mel frame in float32 at
    CosyVoice2's size: 56 layers x keys and values x 2 CFG rows x 512 x 10 steps); the graph computes in
    float32 either way.
    """

    def __init__(self, estimator: Estimator, kv_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.estimator = estimator
        self.kv_dtype = kv_dtype

    @staticmethod
    def layout(estimator: Estimator) -> dict[str, int]:
        """Sizes of the caches this step reads (the converter writes them into the manifest)."""
        stages = [estimator.down_blocks[0], *estimator.mid_blocks, estimator.up_blocks[0]]
        attention = sum(len(stage[1]) for stage in stages)
        convs = sum(2 + (1 if len(stage) > 2 else 0) for stage in stages) + 1
        first = stages[0][1][0].attn1
        return {"attention_layers": attention, "inner": first.heads * first.head_dim, "heads": first.heads,
                "head_dim": first.head_dim, "conv_layers": convs,
                "conv_channels": max(estimator.in_channels, 2 * estimator.final_block.block["0"].out_channels)}

    @staticmethod
    def cache_names(attention_layers: int) -> tuple[list[str], list[str]]:
        """The key/value input names in the order :meth:`forward` takes them, and the output names of
        each layer's share in the order it returns them."""
        return ([f"{kind}_{i}" for i in range(attention_layers) for kind in ("key", "value")],
                [f"kv_out_{i}" for i in range(attention_layers)])

    def forward(self, x, mu, t, spks, cond, conv, *kv):  # noqa: ANN001 - ONNX graph signature
        caches = ChunkCaches(kv[0::2], kv[1::2], conv)
        out = estimator_step(caches, self.estimator, x, mu, t, spks, cond)
        return (out, *(share.to(self.kv_dtype) for share in caches.kv_new), torch.stack(caches.conv_new))
