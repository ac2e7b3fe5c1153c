"""Export CosyVoice2's speech LLM (``llm.pt``, a Qwen2 backbone) to ONNX plus host-side tables.

What is written (all under one output directory):

* ``llm.onnx`` + ``llm.onnx.data`` (its weights, memory-mapped at load): one step graph with an explicit KV cache, used for prefill (past length 0, many
  positions) and for one-token decode (one position). Inputs ``inputs_embeds [1, L, H]`` and
  ``past_key_i`` / ``past_value_i [1, kv_heads, P, head_dim]`` for every layer; outputs ``logp``
  (log-softmax of ``llm_decoder`` at the last position, ``[1, speech_vocab]``) and ``present_key_i`` /
  ``present_value_i [1, kv_heads, P + L, head_dim]``. Attention is ordinary causal attention over the
  whole cache at positions ``P .. P+L-1``. Qwen's own 151936-way ``lm_head`` is not exported:
  upstream computes it and throws it away.
* ``llm_text_embedding.npy`` (int8, one row per text token) + ``llm_text_embedding_scale.npy``
  (float32 per-row scale), ``llm_speech_embedding.npy`` (int8 + ``_scale``, or float) and
  ``llm_special_embedding.npy`` (float32; row 0 = sos, row 1 = task id): gathered on the host,
  memory-mapped.
* ``llm_config.json``: dimensions, special ids, the weight plan and file names for the runtime.

The graph is built directly with ``onnx.helper`` from the checkpoint arrays, so what runs is exactly
what is written here (no tracer). A :class:`WeightPlan` says how weights are stored: the default
(``--quantize int8``) makes every backbone MatMul and the ``llm_decoder`` head a weight-only int8
``MatMulNBits`` (block-128 symmetric scales, float activations); ``INT4_PLAN`` uses 4 bits instead.
Torch is needed only to read ``llm.pt``; nothing here runs at synthesis time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from cosyedge.errors import InputError
from cosyedge.export import read_source

logger = logging.getLogger(__name__)

OPSET = 17
INT8_BLOCK = 32
NBITS = (4, 8)
BLOCKS = (16, 32, 64, 128)  # 128 is the largest that divides every K of the 0.5B model (896 = 7 x 128)
EMBEDDING_DTYPES = ("int8", "float16", "float32")
PREFIX = "llm.model.model."


@dataclass(frozen=True)
class QwenDims:
    """The Qwen2 backbone's shape, from ``CosyVoice-BlankEN/config.json`` (checked against llm.pt)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    rope_theta: float
    rms_eps: float
    text_vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config: Mapping) -> "QwenDims":
        try:
            return cls(hidden=int(config["hidden_size"]), intermediate=int(config["intermediate_size"]),
                       layers=int(config["num_hidden_layers"]), heads=int(config["num_attention_heads"]),
                       kv_heads=int(config.get("num_key_value_heads", config["num_attention_heads"])),
                       rope_theta=float(config.get("rope_theta", 10000.0)),
                       rms_eps=float(config.get("rms_norm_eps", 1e-6)),
                       text_vocab=int(config["vocab_size"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"Qwen2 config.json lacks or mangles {exc}") from exc


def load_checkpoint(path: Path) -> dict[str, np.ndarray]:
    """Read ``llm.pt`` (a plain state dict) into float32 numpy arrays."""
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    return {k: v.detach().float().numpy() for k, v in state.items() if hasattr(v, "detach")}


#: CosyVoice3's ``CosyVoice3LM``: no ``llm_embedding`` (sos and task id are rows 6561 and 6563 of the
#: speech table), ``llm_decoder`` without bias and with 200 outputs past the speech tokens, all stops.
V3_SPECIAL_ROWS = {"sos": 0, "task_id": 2}   # offsets from the speech-token count
V3_EXTRA_OUTPUTS = 200


def check_weights(weights: Mapping[str, np.ndarray], dims: QwenDims, version: int = 2) -> int:
    """Check that ``weights`` hold a Qwen2LM (``version`` 2) or CosyVoice3LM (3) of ``dims``; return the
    speech vocabulary (6564 real for v2, 6761 for v3)."""
    if version == 3:
        if "llm_embedding.weight" in weights or "llm_decoder.bias" in weights:
            raise ValueError("llm.pt is a CosyVoice2 Qwen2LM (it has llm_embedding / a decoder bias), not "
                             "a CosyVoice3LM: convert it with `python -m cosyedge convert cosyvoice2`")
        need = ["speech_embedding.weight", "llm_decoder.weight"]
    else:
        if "llm_embedding.weight" not in weights and "speech_embedding.weight" in weights \
                and "llm_decoder.bias" not in weights:
            raise ValueError("llm.pt is a CosyVoice3LM (no llm_embedding, no decoder bias), not a CosyVoice2 "
                             "Qwen2LM: convert it with `python -m cosyedge convert cosyvoice3`")
        need = ["llm_embedding.weight", "speech_embedding.weight", "llm_decoder.weight", "llm_decoder.bias"]
    need += [PREFIX + "embed_tokens.weight", PREFIX + "norm.weight"]
    for i in range(dims.layers):
        p = f"{PREFIX}layers.{i}."
        need += [p + n for n in ("self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
                                 "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                 "mlp.down_proj.weight", "input_layernorm.weight",
                                 "post_attention_layernorm.weight")]
    missing = [k for k in need if k not in weights]
    if missing:
        kind = "CosyVoice3LM" if version == 3 else "CosyVoice2 Qwen2LM"
        raise ValueError(f"llm.pt is not a {kind}: {len(missing)} keys missing, e.g. {missing[:3]}")
    checks = {
        PREFIX + "embed_tokens.weight": (dims.text_vocab, dims.hidden),
        PREFIX + "layers.0.self_attn.k_proj.weight": (dims.kv_heads * dims.head_dim, dims.hidden),
        PREFIX + "layers.0.mlp.gate_proj.weight": (dims.intermediate, dims.hidden),
    }
    if version != 3:
        checks["llm_embedding.weight"] = (2, dims.hidden)
    for key, shape in checks.items():
        if tuple(weights[key].shape) != shape:
            raise ValueError(f"{key} has shape {tuple(weights[key].shape)}, config.json implies {shape}")
    speech_vocab = int(weights["llm_decoder.weight"].shape[0])
    if weights["speech_embedding.weight"].shape != (speech_vocab, dims.hidden):
        raise ValueError("speech_embedding and llm_decoder disagree on the speech vocabulary")
    return speech_vocab


def quantize_blocks(w_kn: np.ndarray, bits: int = 8, block: int = INT8_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric block-wise quantization of a ``[K, N]`` weight in ``MatMulNBits`` layout.

    Returns ``(codes [N, K/block, block*bits/8] uint8, scales [N, K/block] float32)``. The dequantized
    weight is ``(code - zero) * scale`` with onnxruntime's default zero point (128 for 8 bits, 8 for 4
    bits). 8 bits use the levels -127..127 (scale = max|w| / 127); 4 bits use all 16 levels -8..7, the
    block's largest-magnitude value landing exactly on -8 (scale = that value / -8, so it may be negative).
    4-bit codes are packed two per byte, the even element in the low nibble.
    """
    if bits not in NBITS:
        raise ValueError(f"bits must be one of {NBITS}, not {bits}")
    k, n = w_kn.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the quantization block {block}")
    blocks = np.ascontiguousarray(w_kn.T, dtype=np.float32).reshape(n, k // block, block)
    if bits == 8:
        scale = np.abs(blocks).max(axis=2) / 127.0
        lo, hi, zero = -127, 127, 128
    else:
        idx = np.abs(blocks).argmax(axis=2)[:, :, None]
        scale = np.take_along_axis(blocks, idx, axis=2)[:, :, 0] / -8.0
        lo, hi, zero = -8, 7, 8
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    codes = (np.clip(np.rint(blocks / scale[:, :, None]), lo, hi).astype(np.int16) + zero).astype(np.uint8)
    if bits == 4:
        codes = codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)
    return codes, scale


def dequantize_blocks(codes: np.ndarray, scale: np.ndarray, bits: int = 8) -> np.ndarray:
    """Inverse of :func:`quantize_blocks`, back to ``[K, N]`` float32 (for tests and checks)."""
    if bits == 4:
        codes = np.stack([codes & 0x0F, codes >> 4], axis=-1).reshape(*codes.shape[:2], -1)
    zero = 128.0 if bits == 8 else 8.0
    n, nb, block = codes.shape
    w = (codes.astype(np.float32) - zero) * scale[:, :, None]
    return w.reshape(n, nb * block).T.copy()


def quantize_int8_blocks(w_kn: np.ndarray, block: int = INT8_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """8-bit :func:`quantize_blocks` (codes ``[N, K/block, block]`` with zero point 128)."""
    return quantize_blocks(w_kn, 8, block)


def dequantize_int8_blocks(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of :func:`quantize_int8_blocks`."""
    return dequantize_blocks(codes, scale, 8)


@dataclass(frozen=True)
class WeightPlan:
    """How the LLM's weights are stored: backbone MatMuls, the ``llm_decoder`` head, the speech table.

    ``bits`` 0 keeps the backbone float32; 8 or 4 make every backbone MatMul a weight-only
    ``MatMulNBits`` with ``block``-wise scales. ``decoder_bits`` does the same for the head (0 = fp32).
    ``speech_embedding`` is the storage of the host-side speech table (int8 = per-row scales).
    """

    bits: int = 8
    block: int = INT8_BLOCK
    decoder_bits: int = 0
    speech_embedding: str = "float32"

    def __post_init__(self) -> None:
        if self.bits not in (0, *NBITS) or self.decoder_bits not in (0, *NBITS):
            raise ValueError(f"bits must be 0 (float32) or one of {NBITS}")
        if self.block not in BLOCKS:
            raise ValueError(f"block must be one of {BLOCKS}, not {self.block}")
        if self.speech_embedding not in EMBEDDING_DTYPES:
            raise ValueError(f"speech_embedding must be one of {EMBEDDING_DTYPES}")

    @property
    def label(self) -> str:
        """The manifest's precision string, e.g. ``int4-weight-only-block32``."""
        if not self.bits:
            return "fp32"
        return f"int{self.bits}-weight-only-block{self.block}"


FP32 = WeightPlan(bits=0)
#: What ``--quantize int8`` writes: block 128 decodes ~30 % faster than block 32 and is 34 MB smaller for
#: a slightly larger deviation; the int8 head and speech table save 35 MB (docs/bench-log/cosyvoice.md, "CosyVoice LLM").
DEFAULT_PLAN = WeightPlan(bits=8, block=128, decoder_bits=8, speech_embedding="int8")
#: ``--llm-bits 4``: 4-bit backbone, about half the LLM's size, ~10x the log-prob deviation of int8.
INT4_PLAN = WeightPlan(bits=4, block=32, decoder_bits=8, speech_embedding="int8")


class GraphBuilder:
    """A tiny helper that names nodes and collects initializers for ``onnx.helper``."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def init(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        array = np.asarray(array)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array) if array.ndim else array, name))
        return name

    def const_i64(self, values: list[int]) -> str:
        return self.init(self.name("c"), np.asarray(values, dtype=np.int64))

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1,
           domain: str = "", **attrs) -> str | list[str]:
        from onnx import helper

        outs = [self.name(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name("n_" + op_type),
                                           domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs


def linear(g: GraphBuilder, x: str, w_out_in: np.ndarray, name: str, bits: int, block: int = INT8_BLOCK,
           bias: np.ndarray | None = None) -> str:
    """``x @ W.T (+ b)`` for a torch-layout ``[out, in]`` weight; ``MatMulNBits`` when ``bits`` is 4 or 8."""
    n, k = w_out_in.shape
    while bits and k % block and block > BLOCKS[0]:  # small test models: the largest block that fits K
        block //= 2
    if bits and k % block == 0:
        codes, scale = quantize_blocks(w_out_in.T, bits, block)
        y = g.op("MatMulNBits", [x, g.init(name + f".q{bits}", codes), g.init(name + ".scale", scale.reshape(-1))],
                 hint=name, domain="com.microsoft", K=k, N=n, bits=bits, block_size=block, accuracy_level=4)
    else:
        y = g.op("MatMul", [x, g.init(name + ".w", w_out_in.T.astype(np.float32))], hint=name)
    if bias is not None:
        y = g.op("Add", [y, g.init(name + ".b", bias.astype(np.float32))], hint=name + "_b")
    return y


def _rms_norm(g: GraphBuilder, x: str, weight: np.ndarray, eps: float, name: str) -> str:
    sq = g.op("Mul", [x, x])
    mean = g.op("ReduceMean", [sq], axes=[-1], keepdims=1)
    inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [mean, g.init(name + ".eps", np.float32(eps))])])])
    return g.op("Mul", [g.op("Mul", [x, inv]), g.init(name + ".w", weight.astype(np.float32))], hint=name)


def _rope(g: GraphBuilder, x: str, cos: str, sin: str, half: int, head_dim: int) -> str:
    """Qwen2/Llama rotary embedding on ``x [1, heads, L, D]``: x·cos + rotate_half(x)·sin."""
    x1, x2 = g.op("Split", [x, g.const_i64([half, head_dim - half])], n_out=2, axis=-1)
    rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def build_llm_model(weights: Mapping[str, np.ndarray], dims: QwenDims, plan: WeightPlan = FP32):
    """The ONNX step graph (see module docstring) as an ``onnx.ModelProto``, weights stored per ``plan``."""
    from onnx import TensorProto, helper

    g = GraphBuilder()
    d, hd, half = dims.hidden, dims.head_dim, dims.head_dim // 2
    groups = dims.heads // dims.kv_heads
    speech_vocab = int(weights["llm_decoder.weight"].shape[0])

    inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, [1, "L", d])]
    outputs = [helper.make_tensor_value_info("logp", TensorProto.FLOAT, [1, speech_vocab])]
    for i in range(dims.layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{i}", TensorProto.FLOAT,
                                                        [1, dims.kv_heads, "P", hd]))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{i}", TensorProto.FLOAT,
                                                         [1, dims.kv_heads, "T", hd]))

    # Positions P .. P+L-1, rotary tables [1, 1, L, D] and the causal bias [L, P+L].
    shape_x = g.op("Shape", ["inputs_embeds"])
    seq = g.op("Gather", [shape_x, g.init("idx1", np.int64(1))], axis=0)
    past = g.op("Gather", [g.op("Shape", ["past_key_0"]), g.init("idx2", np.int64(2))], axis=0)
    total = g.op("Add", [past, seq])
    one = g.init("one_i64", np.int64(1))
    zero = g.init("zero_i64", np.int64(0))
    qpos = g.op("Cast", [g.op("Range", [past, total, one])], to=TensorProto.FLOAT)
    inv_freq = 1.0 / (dims.rope_theta ** (np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / hd))
    freqs = g.op("Mul", [g.op("Unsqueeze", [qpos, g.const_i64([1])]),
                         g.init("inv_freq", inv_freq.astype(np.float32)[None, :])])
    emb = g.op("Unsqueeze", [g.op("Concat", [freqs, freqs], axis=-1), g.const_i64([0, 1])])
    cos, sin = g.op("Cos", [emb], hint="cos"), g.op("Sin", [emb], hint="sin")
    kpos = g.op("Cast", [g.op("Range", [zero, total, one])], to=TensorProto.FLOAT)
    future = g.op("Greater", [g.op("Unsqueeze", [kpos, g.const_i64([0])]),
                              g.op("Unsqueeze", [qpos, g.const_i64([1])])])
    bias = g.op("Where", [future, g.init("neg_big", np.float32(-1e9)), g.init("zero_f", np.float32(0.0))],
                hint="causal_bias")

    q_shape = g.const_i64([1, -1, dims.heads, hd])
    kv_shape = g.const_i64([1, -1, dims.kv_heads, hd])
    total_1d = g.op("Unsqueeze", [total, g.const_i64([0])])
    scores5_shape = g.op("Concat", [g.const_i64([1, dims.kv_heads, groups, -1]), total_1d], axis=0)
    scores4_shape = g.op("Concat", [g.const_i64([1, dims.kv_heads, -1]), total_1d], axis=0)
    flat_groups = g.const_i64([1, dims.kv_heads, -1, hd])
    heads_back = g.const_i64([1, dims.heads, -1, hd])
    hidden_shape = g.const_i64([1, -1, d])
    scale = g.init("attn_scale", np.float32(1.0 / np.sqrt(hd)))

    x = "inputs_embeds"
    for i in range(dims.layers):
        p = f"{PREFIX}layers.{i}."
        w = lambda n: weights[p + n]  # noqa: E731 - local shorthand
        h = _rms_norm(g, x, w("input_layernorm.weight"), dims.rms_eps, f"l{i}.ln1")
        qkv_w = np.concatenate([w("self_attn.q_proj.weight"), w("self_attn.k_proj.weight"),
                                w("self_attn.v_proj.weight")], axis=0)
        qkv_b = np.concatenate([w("self_attn.q_proj.bias"), w("self_attn.k_proj.bias"),
                                w("self_attn.v_proj.bias")], axis=0)
        qkv = linear(g, h, qkv_w, f"l{i}.qkv", plan.bits, plan.block, qkv_b)
        kvd = dims.kv_heads * hd
        q, k, v = g.op("Split", [qkv, g.const_i64([d, kvd, kvd])], n_out=3, axis=-1)
        q = g.op("Transpose", [g.op("Reshape", [q, q_shape])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [k, kv_shape])], perm=[0, 2, 1, 3])
        v = g.op("Transpose", [g.op("Reshape", [v, kv_shape])], perm=[0, 2, 1, 3])
        q = _rope(g, q, cos, sin, half, hd)
        k = _rope(g, k, cos, sin, half, hd)
        g.nodes.append(_concat_node(f"past_key_{i}", k, f"present_key_{i}"))
        g.nodes.append(_concat_node(f"past_value_{i}", v, f"present_value_{i}"))
        # Grouped-query attention without copying the cache: query heads h = kv*groups + j share kv.
        qg = g.op("Reshape", [q, flat_groups])                                # [1, KV, G*L, D]
        scores = g.op("MatMul", [qg, g.op("Transpose", [f"present_key_{i}"], perm=[0, 1, 3, 2])])
        scores = g.op("Reshape", [g.op("Mul", [scores, scale]), scores5_shape])  # [1, KV, G, L, T]
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        probs = g.op("Reshape", [probs, scores4_shape])                           # [1, KV, G*L, T]
        ctx = g.op("MatMul", [probs, f"present_value_{i}"])                   # [1, KV, G*L, D]
        ctx = g.op("Reshape", [ctx, heads_back])                              # [1, H, L, D]
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), hidden_shape])
        x = g.op("Add", [x, linear(g, ctx, w("self_attn.o_proj.weight"), f"l{i}.o", plan.bits, plan.block)])
        h = _rms_norm(g, x, w("post_attention_layernorm.weight"), dims.rms_eps, f"l{i}.ln2")
        gate_up = linear(g, h, np.concatenate([w("mlp.gate_proj.weight"), w("mlp.up_proj.weight")], axis=0),
                          f"l{i}.gate_up", plan.bits, plan.block)
        gate, up = g.op("Split", [gate_up, g.const_i64([dims.intermediate, dims.intermediate])],
                        n_out=2, axis=-1)
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, linear(g, act, w("mlp.down_proj.weight"), f"l{i}.down", plan.bits, plan.block)])

    x = _rms_norm(g, x, weights[PREFIX + "norm.weight"], dims.rms_eps, "final_norm")
    last = g.op("Gather", [x, g.op("Sub", [seq, one])], axis=1)             # [1, H]
    logits = linear(g, last, weights["llm_decoder.weight"], "llm_decoder", plan.decoder_bits, plan.block,
                     weights.get("llm_decoder.bias"))  # CosyVoice3's head has no bias
    g.nodes.append(helper.make_node("LogSoftmax", [logits], ["logp"], axis=-1, name="logp"))

    graph = helper.make_graph(g.nodes, "cosyvoice2_llm_step", inputs, outputs, initializer=g.inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="cosyedge")
    model.ir_version = 8
    return model


def _concat_node(past: str, new: str, present: str):
    from onnx import helper

    return helper.make_node("Concat", [past, new], [present], axis=2, name="cat_" + present)


def quantize_text_embedding(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 of an embedding table: ``(codes int8 [V, H], scale float32 [V])``."""
    scale = np.abs(table).max(axis=1) / 127.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    codes = np.clip(np.rint(table / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def _store_table(tables: dict[str, np.ndarray], name: str, table: np.ndarray, dtype: str) -> None:
    """Put ``table`` into ``tables`` as ``dtype`` (int8 adds ``<name>_scale``, one float32 per row)."""
    if dtype == "int8":
        tables[name], tables[name + "_scale"] = quantize_text_embedding(table)
    else:
        tables[name] = table.astype(dtype)


def export_llm(llm_pt: Path, qwen_config: Path, out_dir: Path, plan: WeightPlan = DEFAULT_PLAN,
               text_embedding: str = "int8",
               weights: Mapping[str, np.ndarray] | None = None, version: int = 2) -> dict[str, Path]:
    """Convert ``llm.pt`` + ``CosyVoice-BlankEN/config.json`` into ``out_dir``; return the files written.

    ``plan`` says how the graph's weights and the speech table are stored; ``text_embedding`` picks how
    the 151936-row text table is stored (int8 with per-row scales, float16 or float32). ``weights``
    skips reading llm.pt. ``version`` 3 reads a CosyVoice3LM (see :data:`V3_SPECIAL_ROWS`).
    """
    import onnx

    if text_embedding not in EMBEDDING_DTYPES:
        raise ValueError(f"text_embedding must be one of {EMBEDDING_DTYPES}, not {text_embedding!r}")
    dims = QwenDims.from_config(read_source(Path(qwen_config),
                                            lambda p: json.loads(p.read_text(encoding="utf-8"))))
    weights = dict(weights) if weights is not None else read_source(Path(llm_pt), load_checkpoint)
    speech_vocab = check_weights(weights, dims, version)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    logger.info("exporting Qwen2 LLM: %s, speech vocab %d, %s, text embedding %s", dims, speech_vocab,
                plan, text_embedding)

    model = build_llm_model(weights, dims, plan)
    files = {"llm": out_dir / "llm.onnx"}
    # Weights always go to external data: onnxruntime then memory-maps them instead of copying them out
    # of the protobuf, and drops the mapping once MatMulNBits has repacked them (-195 MB resident for
    # the int8 graph; also keeps fp32 under protobuf's 2 GB limit).
    data_name = "llm.onnx.data"
    (out_dir / data_name).unlink(missing_ok=True)
    onnx.save_model(model, str(files["llm"]), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_name, size_threshold=1024)
    files["llm_data"] = out_dir / data_name
    _same_mode(files["llm_data"], files["llm"])
    del model

    tables: dict[str, np.ndarray] = {}
    _store_table(tables, "text_embedding", weights[PREFIX + "embed_tokens.weight"], text_embedding)
    _store_table(tables, "speech_embedding", weights["speech_embedding.weight"], plan.speech_embedding)
    if version == 3:
        speech_tokens = speech_vocab - V3_EXTRA_OUTPUTS
        rows = [speech_tokens + V3_SPECIAL_ROWS["sos"], speech_tokens + V3_SPECIAL_ROWS["task_id"]]
        tables["special_embedding"] = weights["speech_embedding.weight"][rows].astype(np.float32)
        # v3 stops on any id from speech_tokens on; below the minimum length upstream masks id
        # speech_tokens (its sos), not the end-of-speech id speech_tokens + 1.
        rules = {"speech_token_size": speech_tokens, "eos": speech_tokens + 1, "stop_from": speech_tokens,
                 "min_len_masked": speech_tokens}
    else:
        tables["special_embedding"] = weights["llm_embedding.weight"].astype(np.float32)
        rules = {"speech_token_size": speech_vocab - 3, "eos": speech_vocab - 3}
    for name, array in tables.items():
        files[name] = out_dir / f"llm_{name}.npy"
        np.save(files[name], array)

    config = {"format": 1, "dims": asdict(dims), "head_dim": dims.head_dim, "speech_vocab": speech_vocab,
              **rules, "sos_row": 0, "task_row": 1,
              "quantization": plan.label, "weights": asdict(plan),
              "text_embedding": text_embedding,
              "files": {k: v.name for k, v in files.items()}}
    files["llm_config"] = out_dir / "llm_config.json"
    files["llm_config"].write_text(json.dumps(config, indent=2), encoding="utf-8")
    return files


# ----------------------------------------------------------------------------------------------
# Converter steps (``cosyedge.export.cosyvoice.common.pipeline.llm_step`` and ``frontend_step``)
# ----------------------------------------------------------------------------------------------

QWEN_DIR = "CosyVoice-BlankEN"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json")
FRONTEND_ONNX = ("campplus.onnx", "speech_tokenizer_v2.onnx")
#: The LLM checkpoint files a download may hold, in the order they are preferred: upstream's
#: ``CosyVoice3`` class loads ``llm.pt``; some Fun-CosyVoice3 downloads also or only carry the
#: RL-tuned ``llm.rl.pt`` (same layout).
LLM_FILES = ("llm.pt", "llm.rl.pt")


def speech_tokenizer_name(version: int) -> str:
    """``speech_tokenizer_v2.onnx`` (CosyVoice2) or ``speech_tokenizer_v3.onnx`` (CosyVoice3)."""
    return f"speech_tokenizer_v{version}.onnx"


def llm_source(src: Path) -> str:
    """The LLM checkpoint file of an official directory (:data:`LLM_FILES`, first present wins)."""
    for name in LLM_FILES:
        if (Path(src) / name).is_file():
            return name
    return LLM_FILES[0]


def plan_for(quantize: str, llm_bits: int | None = None) -> WeightPlan:
    """The LLM's weight plan for the converter's ``--quantize`` and ``--llm-bits`` choices."""
    if quantize != "int8":
        if llm_bits:
            raise InputError("--llm-bits needs --quantize int8")
        return FP32
    if llm_bits in (None, 8):
        return DEFAULT_PLAN
    if llm_bits == 4:
        return INT4_PLAN
    raise InputError(f"--llm-bits must be 4 or 8, not {llm_bits}")


def check_options(quantize: str, options: Mapping) -> None:
    """Refuse converter options that need ``--quantize int8`` before any step runs."""
    plan_for(quantize, options.get("llm_bits"))
    if options.get("speech_tokenizer_int8") and quantize != "int8":
        raise InputError("--speech-tokenizer-int8 needs --quantize int8")


def export_llm_step(ctx) -> None:
    """Converter step "llm": ``llm.pt`` + BlankEN config -> ``llm.onnx`` and the gathered tables."""
    version = ctx.model.version
    llm_name = llm_source(ctx.src) if version == 3 else "llm.pt"
    llm_pt = ctx.source_file(llm_name)
    qwen_config = ctx.source_file(f"{QWEN_DIR}/config.json")
    quantize = ctx.quantize == "int8"
    try:
        files = export_llm(llm_pt, qwen_config, ctx.out, plan=plan_for(ctx.quantize, ctx.options.get("llm_bits")),
                           text_embedding="int8" if quantize else "float32", version=version)
    except ValueError as exc:
        raise InputError(f"{llm_pt}: {exc}") from exc
    for key, path in files.items():
        ctx.add_file(path.name, f"llm.{key}")
    config = json.loads(files["llm_config"].read_text(encoding="utf-8"))
    ctx.runtime["llm"] = {"config": files["llm_config"].name, "eos": config["eos"],
                          "speech_vocab": config["speech_vocab"]}
    ctx.quantization["llm"] = {"precision": config["quantization"], "weights": config["weights"],
                               "text_embedding": config["text_embedding"], "source_file": llm_name}
    if version == 3:
        ctx.runtime["llm"].update({k: config[k] for k in ("speech_token_size", "stop_from", "min_len_masked")})


def export_frontend_step(ctx) -> None:
    """Converter step "frontend": copy the tokenizer files, campplus and the speech tokenizer; SFT speakers.

    ``spk2info.pt`` (optional) becomes ``spk2info.npz``: one 192-d campplus embedding per preset name.
    """
    import shutil

    qwen = ctx.src / QWEN_DIR
    copied = []
    for name in TOKENIZER_FILES:
        if (qwen / name).is_file():
            dest = ctx.add_file(f"tokenizer/{name}", "frontend.tokenizer")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(qwen / name, dest)
            copied.append(name)
    if "tokenizer.json" not in copied and not {"vocab.json", "merges.txt"} <= set(copied):
        ctx.source_file(f"{QWEN_DIR}/vocab.json")  # raises with the "point --src at ..." message
        ctx.source_file(f"{QWEN_DIR}/merges.txt")
    onnx_files = (FRONTEND_ONNX[0], speech_tokenizer_name(ctx.model.version))
    for name in onnx_files:  # parsed first: a truncated graph would fail only when a voice is cloned
        source = read_source(ctx.source_file(name), _parsed_onnx)
        shutil.copyfile(source, ctx.add_file(name, "frontend." + name.split(".")[0]))
    if ctx.options.get("speech_tokenizer_int8"):
        check_options(ctx.quantize, ctx.options)
        ctx.quantization[onnx_files[1]] = int8_speech_tokenizer(ctx.out / onnx_files[1])
    data = move_weights_to_external_data(ctx.out / onnx_files[1])
    ctx.add_file(data.name, "frontend.speech_tokenizer_weights")
    runtime = {"tokenizer": "tokenizer", "campplus": onnx_files[0], "speech_tokenizer": onnx_files[1]}
    runtime.update(save_presets(ctx))
    ctx.runtime["frontend"] = runtime


def _parsed_onnx(path: Path) -> Path:
    """``path`` once its graph parses (its external weights, if any, are not read)."""
    import onnx

    onnx.load(str(path), load_external_data=False)
    return path


def move_weights_to_external_data(path: Path) -> Path:
    """Re-save the graph at ``path`` with its weights in ``<name>.data`` beside it; return that path.

    The weights are unchanged (bit for bit). onnxruntime memory-maps external data instead of copying
    it out of the protobuf, which lowers the transient peak when the session opens (the speech
    tokenizer is opened for every new voice, next to the loaded LLM and flow): measured on a 0.5 GB
    stand-in, +517 instead of +600 MB (fp32) and +151 instead of +251 MB (int8).
    """
    import onnx

    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    if not data.is_file():  # nothing above the threshold: an empty file keeps the manifest uniform
        data.write_bytes(b"")
    _same_mode(data, path)
    return data


def _same_mode(data: Path, graph: Path) -> None:
    """onnx writes external data owner-only (0600); give it the graph file's permissions."""
    data.chmod(graph.stat().st_mode & 0o777)


def int8_speech_tokenizer(path: Path, frames: int = 500, seed: int = 0) -> dict:
    """Replace the speech tokenizer at ``path`` by its dynamic-int8 version (MatMul/Gemm weights int8).

    Returns the manifest record: bytes before/after and the share of speech tokens that stay the same on
    one random log-mel input of ``frames`` frames (``[1, 128, frames]`` + its length, fed by position as
    :class:`~cosyedge.engines.cosyvoice.common.prompt_encoders.PromptEncoder` does). Random input is not speech:
    the agreement is a wiring check and a rough measure, not a quality guarantee.
    """
    import onnxruntime as ort

    from cosyedge.export.cosyvoice.common.quantize import quantize_file

    tmp = path.with_suffix(".int8.onnx")
    quantize_file(path, tmp, ["MatMul", "Gemm"])
    rng = np.random.default_rng(seed)
    mel = (rng.standard_normal((1, 128, frames)) * 0.5).astype(np.float32)
    tokens = []
    for graph in (path, tmp):
        session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        tokens.append(np.asarray(session.run(None, {names[0]: mel, names[1]: np.array([frames], np.int32)})[0]))
        del session
    agree = float(np.mean(tokens[0] == tokens[1])) if tokens[0].shape == tokens[1].shape else 0.0
    before, after = path.stat().st_size, tmp.stat().st_size
    tmp.replace(path)
    logger.info("speech tokenizer int8: %d -> %d bytes, %.1f %% of tokens unchanged on a random input",
                before, after, 100 * agree)
    return {"precision": "int8", "ops": ["MatMul", "Gemm"], "bytes_fp32": before, "bytes_int8": after,
            "token_agreement_random_input": round(agree, 4)}


def save_presets(ctx) -> dict[str, str]:
    """``spk2info.pt``'s speakers (the SFT presets), when the checkpoint has one, as
    ``spk2info.npz``; returns the frontend's manifest entry for it."""
    if not (ctx.src / "spk2info.pt").is_file():
        return {}
    speakers = read_source(ctx.src / "spk2info.pt", read_spk2info)
    np.savez(ctx.add_file("spk2info.npz", "frontend.presets"), **speakers)
    logger.info("SFT presets: %s", ", ".join(speakers) or "none")
    return {"presets": "spk2info.npz"}


def read_spk2info(path: Path) -> dict[str, np.ndarray]:
    """``{speaker: embedding [192] float32}`` from upstream's ``spk2info.pt`` (name -> {'embedding': ...})."""
    import torch

    data = torch.load(str(path), map_location="cpu", weights_only=True)
    speakers = {}
    for name, info in (data or {}).items():
        emb = info.get("embedding") if isinstance(info, dict) else None
        if emb is None:
            logger.warning("spk2info entry %r has no embedding; skipped", name)
            continue
        speakers[str(name)] = emb.detach().float().numpy().reshape(-1)
    return speakers
