"""Test-only: turn a converted CosyVoice-300M directory back into one with the format-1 LLM step graph.

Models converted before the step graph wrote its cache in place (``config.llm.step_format`` absent)
carry a graph that takes the whole cache and the position-major ``pos_proj_i`` rows and returns the
cache concatenated. The run time still reads them (``ConcatSteps``); this module rebuilds that graph
from ``llm.pt`` as the converter exported it then (a torch module traced by ``torch.onnx.export``,
float32 weights), and rewrites a format-2 directory's step graph and manifest to it, so a test can
check that such a model loads and speaks as the new one does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cosyedge.catalog.manifest import sha256_file
from cosyedge.export.cosyvoice.v1.nets import CausalLayer


class _Step(nn.Module):
    """inputs [1, L, input] + per layer (past_key, past_value, pos_proj) -> logp + the grown cache."""

    def __init__(self, input_size: int, hidden: int, heads: int, units: int, blocks: int, vocab: int) -> None:
        super().__init__()
        self.llm = nn.Module()
        self.llm.embed = nn.Module()
        self.llm.embed.out = nn.ModuleDict({"0": nn.Linear(input_size, hidden), "1": nn.LayerNorm(hidden, eps=1e-5)})
        self.llm.encoders = nn.ModuleList([CausalLayer(hidden, heads, units, conformer=False) for _ in range(blocks)])
        self.llm.after_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.llm_decoder = nn.Linear(hidden, vocab)
        self.scale = math.sqrt(hidden)

    def forward(self, inputs_embeds, *cache):  # noqa: ANN001 - graph signature
        x = F.relu(self.llm.embed.out["1"](self.llm.embed.out["0"](inputs_embeds))) * self.scale
        presents = []
        for i, layer in enumerate(self.llm.encoders):
            x, k, v = layer(x, *cache[3 * i:3 * i + 3])
            presents += [k, v]
        return (torch.log_softmax(self.llm_decoder(self.llm.after_norm(x[:, -1])), dim=-1), *presents)


def rewrite_as_format1(model_dir: Path, llm_pt: Path) -> None:
    """Replace ``model_dir``'s step graph by the format-1 graph of ``llm_pt`` (float32) and make its
    manifest say what such a model's said (no ``step_format``, no ``cache_head_dim``, no weights file)."""
    model_dir = Path(model_dir)
    manifest = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))
    llm = manifest["config"]["llm"]
    heads, head_dim, blocks = llm["heads"], llm["head_dim"], llm["layers"]
    state = {k: v for k, v in torch.load(llm_pt, map_location="cpu", weights_only=True).items()
             if k.startswith(("llm.", "llm_decoder."))}
    step = _Step(llm["input_size"], llm["hidden"], heads, state["llm.encoders.0.feed_forward.w_1.weight"].shape[0],
                 blocks, llm["speech_vocab"] + 1).eval()
    step.load_state_dict(state, strict=True)
    names, example, axes, outputs = ["inputs_embeds"], [torch.randn(1, 2, llm["input_size"])], {"inputs_embeds": {1: "L"}}, ["logp"]
    for i in range(blocks):
        names += [f"past_key_{i}", f"past_value_{i}", f"pos_proj_{i}"]
        example += [torch.randn(1, heads, 3, head_dim), torch.randn(1, heads, 3, head_dim), torch.randn(5, heads * head_dim)]
        axes.update({f"past_key_{i}": {2: "P"}, f"past_value_{i}": {2: "P"}, f"pos_proj_{i}": {0: "T"},
                     f"present_key_{i}": {2: "T"}, f"present_value_{i}": {2: "T"}})
        outputs += [f"present_key_{i}", f"present_value_{i}"]
    graph = model_dir / llm["files"]["step"]
    with torch.no_grad():
        torch.onnx.export(step, tuple(example), str(graph), input_names=names, output_names=outputs,
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    weights = graph.name + ".data"
    (model_dir / weights).unlink(missing_ok=True)
    manifest["files"].pop(weights, None)
    manifest["files"][graph.name].update(bytes=graph.stat().st_size, sha256=sha256_file(graph))
    for key in ("step_format", "cache_head_dim", "input_size"):
        llm.pop(key, None)
    (model_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
