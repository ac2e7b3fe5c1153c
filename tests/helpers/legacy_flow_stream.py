"""Test-only: a converted CosyVoice2 model as the first streaming converter wrote it.

Its streamed estimator graph took the whole key/value cache as one packed input
``kv [frames, layers, 2, B, inner]`` (frames first), concatenated each layer's slice with the chunk's
new keys/values and ran one ``MultiHeadAttention`` over them; its manifest's ``flow.stream`` has no
``kv_layout``. The converter now writes the chunk-blocked form (``flow_stream_nets.ChunkCaches``), but
models converted before must keep streaming: :func:`write_packed_copy` makes such a model from a
current conversion (same weights, the old estimator-step graph), so the tests can check that.

Needs torch (the reference environment): ``tests.helpers.cosyvoice_tiny`` builds one for `.venv` tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from cosyedge.export.cosyvoice.common.flow import ESTIMATOR_STREAM_FILE, OPSET, flow_config, load_flow, quiet_export
from cosyedge.export.cosyvoice.common.flow_stream_nets import CONV_TAIL, EstimatorStep, StepCaches, estimator_step
from cosyedge.export.cosyvoice.common.quantize import PLAN, quantize_file
from cosyedge.export.cosyvoice.common.upstream_config import read_config

#: The manifest keys the packed form's ``flow.stream`` section did not have.
NEW_KEYS = ("kv_layout", "heads", "head_dim", "chunk_frames")


class ConcatAttention(torch.autograd.Function):
    """Unmasked multi-head attention of a query chunk over keys/values [B, Lk, H*D], exported as one
    ``com.microsoft.MultiHeadAttention`` node (as the first converter did)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
        b, lq, inner = q.shape
        d = inner // heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.reshape(b, y.shape[1], heads, d).transpose(1, 2)

        scores = torch.matmul(split(q), split(k).transpose(-2, -1)) * (d ** -0.5)
        return torch.matmul(torch.softmax(scores, dim=-1), split(v)).transpose(1, 2).reshape(b, lq, inner)

    @staticmethod
    def symbolic(g, q, k, v, heads: int):  # torch.onnx symbolic signature: g is the graph context
        out = g.op("com.microsoft::MultiHeadAttention", q, k, v, num_heads_i=heads)
        out.setType(q.type())
        return out


class PackedCaches(StepCaches):
    """The packed cache: layer ``i``'s keys are ``kv[:, i, 0]`` ([P, B, inner], frames first)."""

    def __init__(self, kv: torch.Tensor, conv: torch.Tensor) -> None:
        super().__init__(conv)
        self.kv = kv

    def attention_step(self, attn, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        index = len(self.kv_new)
        q, k_new, v_new = attn.to_q(x), attn.to_k(x), attn.to_v(x)
        k = torch.cat([self.kv[:, index, 0].transpose(0, 1), k_new], dim=1)
        v = torch.cat([self.kv[:, index, 1].transpose(0, 1), v_new], dim=1)
        self.kv_new.append(torch.stack([k_new, v_new]))                               # [2, B, L, inner]
        return attn.to_out[0](ConcatAttention.apply(q, k, v, attn.heads))


class PackedEstimatorStep(nn.Module):
    """(x, mu, t, spks, cond, kv, conv) -> (velocity, kv_out [L, layers, 2, B, inner], conv tails)."""

    def __init__(self, estimator, kv_dtype: torch.dtype) -> None:  # noqa: ANN001
        super().__init__()
        self.estimator, self.kv_dtype = estimator, kv_dtype

    def forward(self, x, mu, t, spks, cond, kv, conv):  # noqa: ANN001 - ONNX graph signature
        caches = PackedCaches(kv.to(torch.float32), conv)
        out = estimator_step(caches, self.estimator, x, mu, t, spks, cond)
        kv_new = torch.stack(caches.kv_new).permute(3, 0, 1, 2, 4)                    # [L, layers, 2, B, inner]
        return out, kv_new.to(self.kv_dtype), torch.stack(caches.conv_new)


def export_packed_estimator(src: Path, path: Path, quantize: str) -> None:
    """The packed estimator-step graph of checkpoint ``src``'s ``flow.pt`` at ``path`` (int8 as the
    converter quantized it, with a float16 cache, when ``quantize`` is ``int8``)."""
    cfg = flow_config(read_config(Path(src) / "cosyvoice2.yaml"))
    _, estimator = load_flow(torch.load(Path(src) / "flow.pt", map_location="cpu", weights_only=True), cfg)
    layout = EstimatorStep.layout(estimator)
    kv_dtype = torch.float16 if quantize == "int8" else torch.float32
    t = 6
    example = (torch.randn(2, 80, t), torch.randn(2, 80, t), torch.rand(2), torch.randn(2, 80), torch.randn(2, 80, t),
               torch.randn(4, layout["attention_layers"], 2, 2, layout["inner"]).to(kv_dtype),
               torch.randn(layout["conv_layers"], 2, CONV_TAIL, layout["conv_channels"]))
    seq = {0: "batch", 2: "n_frames"}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "packed.onnx"
        with torch.no_grad(), quiet_export():
            torch.onnx.export(
                PackedEstimatorStep(estimator, kv_dtype).eval(), example, str(fp32),
                input_names=["x", "mu", "t", "spks", "cond", "kv", "conv"],
                output_names=["estimator_out", "kv_out", "conv_out"],
                dynamic_axes={"x": seq, "mu": seq, "cond": seq, "t": {0: "batch"}, "spks": {0: "batch"},
                              "kv": {0: "past_frames", 3: "batch"}, "conv": {1: "batch"}, "estimator_out": seq,
                              "kv_out": {0: "n_frames", 3: "batch"}, "conv_out": {1: "batch"}},
                opset_version=OPSET, custom_opsets={"com.microsoft": 1}, dynamo=False)
        if quantize == "int8":
            plan = PLAN[ESTIMATOR_STREAM_FILE]
            quantize_file(fp32, path, plan["ops"], per_channel=plan.get("per_channel", False))
        else:
            shutil.copyfile(fp32, path)


def write_packed_copy(model: Path, out: Path, src: Path) -> Path:
    """A copy of converted model ``model`` at ``out`` whose streamed estimator is the packed form,
    exported from checkpoint ``src``, with the manifest such a conversion wrote (other files are hard
    links). Returns ``out``."""
    model, out = Path(model), Path(out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out, copy_function=os.link)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    target = out / ESTIMATOR_STREAM_FILE
    target.unlink()  # a hard link to the current form: replace, never write through it
    export_packed_estimator(src, target, manifest.get("quantization", "none"))
    stream = manifest["config"]["flow"]["stream"]
    for key in NEW_KEYS:
        stream.pop(key, None)
    data = target.read_bytes()
    manifest["files"][ESTIMATOR_STREAM_FILE].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest_path.unlink()
    manifest_path.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out
