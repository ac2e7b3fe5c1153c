"""CosyVoice-300M's LLM step as one ONNX graph written from ``llm.pt``'s arrays (step format 2).

The graph runs upstream's ``TransformerEncoder`` (``linear_legacy`` input layer, pre-norm layers with
Transformer-XL relative attention, ReLU feed-forward) on ``L`` new positions after a KV cache, and
returns the log-probs of the next speech token. It is built so that a decode step copies nothing
that grows with the sequence:

* **The cache is written in place.** Each layer's keys and values live in one buffer per layer,
  ``[1, heads, capacity, head_dim]``, that the caller binds as both ``past_*`` and ``present_*``
  (onnxruntime IOBinding): ``com.microsoft.GroupQueryAttention`` appends the new rows there and
  attends to the first ``total_sequence_length`` rows only (``seqlens_k`` = that length - 1).
* **The positional term needs no transpose.** Upstream scores key ``j`` for query ``i`` with
  ``(q_i + u)·k_j + (q_i + v)·linear_pos(pe(i - j))``, all over ``sqrt(head_dim)``. The projections
  ``linear_pos(pe(r))`` depend on the offset only; the caller feeds them per layer as
  ``pos_table_i [1, heads, head_dim, R]`` (per head, one row per channel, one column per offset
  ``r < R``, ``R`` >= the total length: the layout a plain product reads fastest) and the graph reads
  them with one ``FusedMatMul`` (scaled) and one ``GatherElements`` by offset;
  the result is the attention bias of ``GroupQueryAttention``, whose own causal mask hides the
  future (so one graph serves the prefill and the one-token steps).
* ``u`` is folded into the query's bias (the content query is ``q + u``) and ``v - u`` is added to
  get the positional query, so ``linear_q`` runs once, fused with ``linear_k`` / ``linear_v``.
* onnxruntime's attention kernel takes heads of a multiple of 8 channels: a model whose heads are
  not (the tests' odd sizes; CosyVoice-300M's are 64) gets zero channels appended to each head of
  ``q``, ``k`` and ``v`` (zero rows in their weights: every dot product is unchanged) and cut off
  again before ``linear_out`` and the positional product; its cache is ``cache_head_dim`` wide.

Weights follow a :class:`~cosyedge.export.cosyvoice.common.llm.WeightPlan`, as CosyVoice2's LLM
(``MatMulNBits`` int8 block 128 by default, ``--llm-bits 4``); onnxruntime folds each bias ``Add``
into its ``MatMulNBits`` at load. Nothing here runs at synthesis time.
"""

from __future__ import annotations

import logging
import math
from typing import Mapping

import numpy as np

from cosyedge.export.cosyvoice.common.llm import FP32, GraphBuilder, WeightPlan, linear

logger = logging.getLogger(__name__)

#: What ``config.llm.step_format`` says for this graph (models converted before have none: format 1,
#: the graph with ``pos_proj_i`` rows and a concatenated cache).
STEP_FORMAT = 2
OPSET = 17
#: Layer norms of the Transformer layers (espnet ``LayerNorm(eps=1e-12)``) and of the input layer and
#: ``after_norm`` (``1e-5``), as upstream builds them.
LAYER_EPS, OUTER_EPS = 1e-12, 1e-5


def cache_head_dim(head_dim: int) -> int:
    """The channels per head of the cache (and of onnxruntime's attention): ``head_dim`` rounded up to 8."""
    return -(-head_dim // 8) * 8


def build_step_model(state: Mapping[str, np.ndarray], cfg, plan: WeightPlan = FP32):
    """The step graph for the ``llm.*`` / ``llm_decoder.*`` arrays of ``state`` (float32 numpy) with
    the sizes of ``cfg`` (a :class:`~cosyedge.export.cosyvoice.v1.nets.LMConfig`), as an
    ``onnx.ModelProto``; inputs and outputs as the module docstring says."""
    from onnx import TensorProto, helper

    g = GraphBuilder()
    heads, head_dim, hidden = cfg.heads, cfg.head_dim, cfg.hidden
    if heads * head_dim != hidden:
        raise ValueError(f"the LLM's {hidden} channels do not split into {heads} heads")
    vocab = int(state["llm_decoder.weight"].shape[0])
    padded = cache_head_dim(head_dim)
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    inputs = [helper.make_tensor_value_info("inputs_embeds", f32, [1, "L", cfg.input_size]),
              helper.make_tensor_value_info("seqlens_k", i32, [1]),
              helper.make_tensor_value_info("total_sequence_length", i32, [])]
    outputs = [helper.make_tensor_value_info("logp", f32, [1, vocab])]
    for i in range(cfg.blocks):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{i}", f32, [1, heads, "C", padded]))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{i}", f32, [1, heads, "C", padded]))
        inputs.append(helper.make_tensor_value_info(f"pos_table_{i}", f32, [1, heads, head_dim, "R"]))

    # Once per call: the offset i - j of every (query, key) pair, clamped at 0 (GQA masks j > i).
    total = g.op("Cast", ["total_sequence_length"], to=TensorProto.INT64)
    seq = g.op("Gather", [g.op("Shape", ["inputs_embeds"]), g.init("axis1", np.int64(1))], axis=0)
    one, zero = g.init("one_i64", np.int64(1)), g.init("zero_i64", np.int64(0))
    qpos = g.op("Range", [g.op("Sub", [total, seq]), total, one])
    kpos = g.op("Range", [zero, total, one])
    offset = g.op("Sub", [g.op("Unsqueeze", [qpos, g.const_i64([1])]), g.op("Unsqueeze", [kpos, g.const_i64([0])])])
    offset = g.op("Max", [offset, zero])
    offset = g.op("Expand", [g.op("Unsqueeze", [offset, g.const_i64([0, 1])]), g.const_i64([1, heads, 1, 1])],
                  hint="offsets")                                                     # [1, H, L, T]
    heads_first = g.const_i64([1, -1, heads, padded])
    scale = 1.0 / math.sqrt(head_dim)

    def w(name: str) -> np.ndarray:
        return np.asarray(state[name], dtype=np.float32)

    def per_head(array: np.ndarray) -> np.ndarray:
        """Rows (or entries) ``h * head_dim + d`` -> ``h * padded + d``, the new ones zero."""
        split = array.reshape(heads, head_dim, *array.shape[1:])
        pad = [(0, 0), (0, padded - head_dim)] + [(0, 0)] * (array.ndim - 1)
        return np.pad(split, pad).reshape(heads * padded, *array.shape[1:])

    def unpad(x: str) -> str:
        """``x`` [..., padded] -> [..., head_dim] (nothing when no channel was added)."""
        if padded == head_dim:
            return x
        return g.op("Slice", [x, g.const_i64([0]), g.const_i64([head_dim]), g.const_i64([-1])])

    def norm(x: str, prefix: str, eps: float) -> str:
        return g.op("LayerNormalization", [x, g.init(prefix + ".w", w(prefix + ".weight")),
                                           g.init(prefix + ".b", w(prefix + ".bias"))], axis=-1, epsilon=eps)

    # linear_legacy: Linear, LayerNorm, ReLU, then the rel-pos encoding's sqrt(d) scale.
    x = linear(g, "inputs_embeds", w("llm.embed.out.0.weight"), "embed", plan.bits, plan.block,
               w("llm.embed.out.0.bias"))
    x = g.op("Relu", [norm(x, "llm.embed.out.1", OUTER_EPS)])
    x = g.op("Mul", [x, g.init("embed_scale", np.float32(math.sqrt(hidden)))])
    for i in range(cfg.blocks):
        p = f"llm.encoders.{i}."
        u, v = w(p + "self_attn.pos_bias_u").reshape(-1), w(p + "self_attn.pos_bias_v").reshape(-1)
        h = norm(x, p + "norm1", LAYER_EPS)
        qkv_w = np.concatenate([per_head(w(p + f"self_attn.linear_{n}.weight")) for n in "qkv"], axis=0)
        qkv_b = np.concatenate([per_head(w(p + "self_attn.linear_q.bias") + u),
                                per_head(w(p + "self_attn.linear_k.bias")), per_head(w(p + "self_attn.linear_v.bias"))])
        qkv = linear(g, h, qkv_w, f"l{i}.qkv", plan.bits, plan.block, qkv_b)
        q_u, k, val = g.op("Split", [qkv, g.const_i64([heads * padded] * 3)], n_out=3, axis=-1)
        q_v = g.op("Add", [q_u, g.init(f"l{i}.v_minus_u", per_head(v - u))])
        q_v = g.op("Transpose", [g.op("Reshape", [q_v, heads_first])], perm=[0, 2, 1, 3])   # [1, H, L, Dp]
        q_v = unpad(q_v)                                                                     # [1, H, L, D]
        by_offset = g.op("FusedMatMul", [q_v, f"pos_table_{i}"], domain="com.microsoft", alpha=scale,
                         transA=0, transB=0)                                                 # [1, H, L, R]
        bias = g.op("GatherElements", [by_offset, offset], axis=3, hint=f"l{i}.pos_bias")   # [1, H, L, T]
        attn = g.name(f"l{i}.attn")
        g.nodes.append(helper.make_node(
            "GroupQueryAttention", [q_u, k, val, f"past_key_{i}", f"past_value_{i}", "seqlens_k",
                                    "total_sequence_length", "", "", "", bias],
            [attn, f"present_key_{i}", f"present_value_{i}"], name=g.name("n_GroupQueryAttention"),
            domain="com.microsoft", num_heads=heads, kv_num_heads=heads, scale=scale))
        if padded != head_dim:
            attn = g.op("Reshape", [unpad(g.op("Reshape", [attn, heads_first])), g.const_i64([1, -1, hidden])])
        x = g.op("Add", [x, linear(g, attn, w(p + "self_attn.linear_out.weight"), f"l{i}.out", plan.bits,
                                   plan.block, w(p + "self_attn.linear_out.bias"))])
        h = norm(x, p + "norm2", LAYER_EPS)
        h = g.op("Relu", [linear(g, h, w(p + "feed_forward.w_1.weight"), f"l{i}.w1", plan.bits, plan.block,
                                 w(p + "feed_forward.w_1.bias"))])
        x = g.op("Add", [x, linear(g, h, w(p + "feed_forward.w_2.weight"), f"l{i}.w2", plan.bits, plan.block,
                                   w(p + "feed_forward.w_2.bias"))])
    last = g.op("Gather", [x, g.op("Sub", [seq, one])], axis=1)                              # [1, hidden]
    logits = linear(g, norm(last, "llm.after_norm", OUTER_EPS), w("llm_decoder.weight"), "llm_decoder",
                    plan.decoder_bits, plan.block, w("llm_decoder.bias"))
    g.nodes.append(helper.make_node("LogSoftmax", [logits], ["logp"], axis=-1, name="logp"))

    graph = helper.make_graph(g.nodes, "cosyvoice1_llm_step", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="cosyedge")
    model.ir_version = 8
    return model


def step_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every ``llm.*`` / ``llm_decoder.*`` array the graph reads, with the shape ``cfg`` implies."""
    hidden, units = cfg.hidden, cfg.units
    shapes: dict[str, tuple[int, ...]] = {
        "llm.embed.out.0.weight": (hidden, cfg.input_size), "llm.embed.out.0.bias": (hidden,),
        "llm.embed.out.1.weight": (hidden,), "llm.embed.out.1.bias": (hidden,),
        "llm.after_norm.weight": (hidden,), "llm.after_norm.bias": (hidden,),
        "llm_decoder.weight": (cfg.speech_vocab + 1, hidden), "llm_decoder.bias": (cfg.speech_vocab + 1,)}
    for i in range(cfg.blocks):
        p = f"llm.encoders.{i}."
        for name in ("q", "k", "v", "out"):
            shapes[p + f"self_attn.linear_{name}.weight"] = (hidden, hidden)
            shapes[p + f"self_attn.linear_{name}.bias"] = (hidden,)
        shapes[p + "self_attn.linear_pos.weight"] = (hidden, hidden)
        shapes[p + "self_attn.pos_bias_u"] = shapes[p + "self_attn.pos_bias_v"] = (cfg.heads, cfg.head_dim)
        shapes.update({p + "feed_forward.w_1.weight": (units, hidden), p + "feed_forward.w_1.bias": (units,),
                       p + "feed_forward.w_2.weight": (hidden, units), p + "feed_forward.w_2.bias": (hidden,)})
        for norm in ("norm1", "norm2"):
            shapes[p + norm + ".weight"] = shapes[p + norm + ".bias"] = (hidden,)
    return shapes


def check_step_state(state: Mapping[str, np.ndarray], cfg) -> str | None:
    """What is wrong with ``state``'s ``llm.*`` / ``llm_decoder.*`` arrays for ``cfg`` (missing,
    unexpected, or a shape other than the sizes imply, naming both), or None."""
    shapes = step_shapes(cfg)
    missing, stray = sorted(set(shapes) - set(state)), sorted(set(state) - set(shapes))
    if missing or stray:
        return f"missing {missing[:3]}, unexpected {stray[:3]}"
    for key, shape in shapes.items():
        if tuple(state[key].shape) != shape:
            return f"{key} has shape {tuple(state[key].shape)}, the sizes imply {shape}"
    return None


def step_snr(reference, path, cfg, pos_weight: np.ndarray, prompt: int = 7, steps: int = 3,
             seed: int = 0) -> float:
    """SNR (dB) of graph ``path``'s log-probs against graph ``reference``'s, both run as the engine runs
    them (:class:`~cosyedge.engines.cosyvoice.v1.llm.BufferedSteps`) over a random prefill of ``prompt``
    positions and ``steps`` one-position steps."""
    from cosyedge.engines.cosyvoice.common.llm import make_session
    from cosyedge.engines.cosyvoice.v1.llm import BufferedSteps, LMConfigV1, PositionTable
    from cosyedge.export.cosyvoice.common.quantize import snr_db

    config = LMConfigV1(hidden=cfg.hidden, heads=cfg.heads, head_dim=cfg.head_dim, layers=cfg.blocks,
                        text_input=cfg.text_input, speech_vocab=cfg.speech_vocab, eos=cfg.speech_vocab,
                        input_size=cfg.input_size, cache_head_dim=cache_head_dim(cfg.head_dim))
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal((prompt, cfg.input_size)).astype(np.float32)]
    inputs += [rng.standard_normal((1, cfg.input_size)).astype(np.float32) for _ in range(steps)]
    positions = PositionTable(np.asarray(pos_weight, dtype=np.float32))
    outs = []
    for graph in (reference, path):
        run = BufferedSteps(make_session(graph, 2), config, positions, prompt + steps)
        outs.append(np.concatenate([run(x) for x in inputs]))
        del run
    return round(snr_db(outs[0], outs[1]), 2)
