"""Test-only: a complete tiny CosyVoice2 checkpoint in the official layout, and its conversion.

``write_tiny_checkpoint(dir)`` writes what a download of CosyVoice2-0.5B holds, shrunken and random:
``cosyvoice2.yaml``, ``flow.pt``, ``hift.pt`` (part 1's reference builders), ``llm.pt`` +
``CosyVoice-BlankEN/`` (tiny Qwen2 config + weights + a tiny Qwen2-layout tokenizer), stand-ins for
``campplus.onnx`` and ``speech_tokenizer_v2.onnx`` with the official input/output signatures, and a
``spk2info.pt`` with two SFT speakers. The LLM's end-of-speech bias is raised (:data:`EOS_BIAS`).

Run as a module it builds the cache that `.venv` tests use (see tests/helpers/tiny_models.py)::

    .venv-ref/bin/python -m tests.helpers.cosyvoice_tiny --out test-artifacts/tiny-models

It converts the checkpoint with int8 as ``cosyvoice2-tiny`` and does nothing while the cache's stamp
still matches (``--force`` rebuilds).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers import REPO, cosyvoice_llm_reference as _llm_reference, cosyvoice_reference as _reference
from tests.helpers import tiny_models
from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer
from tests.helpers.tiny_models import PRESET_NAMES

#: Added to the end-of-speech logit of the random LLM so that synthesis stops soon after the minimum
#: length instead of running to 20x the text (keeps the tests fast; the decision rules are unchanged).
EOS_BIAS = 12.0


def _save(model, path: Path) -> None:
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def campplus_standin(path: Path, seed: int = 0) -> None:
    """``input [1, T, 80]`` -> ``output [1, 192]``: mean over time, then a random projection."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(seed).normal(size=(80, 192)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["input"], ["m"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["m", "w"], ["output"])]
    graph = helper.make_graph(nodes, "campplus_standin",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "T", 80])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 192])],
                              initializer=[numpy_helper.from_array(w, "w")])
    _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def speech_tokenizer_standin(path: Path, seed: int = 1, vocab: int = 6561, stride: int = 4) -> None:
    """``feats [1, 128, T]`` + ``feats_length [1]`` -> ``indices [1, T/stride]``: every ``stride``-th
    frame, argmax over ``vocab`` (v2: 25 Hz of 6561; v1: 50 Hz of 4096)."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(seed).normal(size=(128, vocab)).astype(np.float32)
    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in
              (("starts", [0]), ("ends", [1 << 30]), ("axes", [2]), ("steps", [stride]))]
    nodes = [helper.make_node("Slice", ["feats", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "w"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["a"], axis=-1, keepdims=0),
             helper.make_node("Cast", ["a"], ["indices"], to=TensorProto.INT32)]
    graph = helper.make_graph(nodes, "speech_tokenizer_standin",
                              [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
                               helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
                              [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "N"])],
                              initializer=[numpy_helper.from_array(w, "w")] + consts)
    _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def write_tiny_checkpoint(directory: Path, presets: bool = True) -> dict:
    """Write the checkpoint; return ``{"dir": Path, "llm": ..., "flow": ..., "hift": ...}`` (upstream modules)."""
    import torch

    directory = Path(directory)
    flow, hift = _reference.build_flow("tiny"), _reference.build_hift("tiny")
    _reference.write_model_dir(directory, flow=flow, hift=hift)
    qwen = directory / "CosyVoice-BlankEN"
    llm = _llm_reference.build_llm(qwen, std=0.5)
    with torch.no_grad():  # make end-of-speech likely once allowed, so runs stop near 2x the text tokens
        llm.llm_decoder.bias[_llm_reference.EOS] += EOS_BIAS
    (qwen / "model.safetensors").unlink(missing_ok=True)  # the real one only seeds from_pretrained
    write_tiny_tokenizer(qwen)
    _llm_reference.save_checkpoint(llm, directory)
    campplus_standin(directory / "campplus.onnx")
    speech_tokenizer_standin(directory / "speech_tokenizer_v2.onnx")
    if presets:
        gen = torch.Generator().manual_seed(3)
        torch.save({name: {"embedding": torch.randn(1, 192, generator=gen)} for name in PRESET_NAMES},
                   directory / "spk2info.pt")
    return {"dir": directory, "llm": llm, "flow": flow, "hift": hift}


_CACHE: dict[str, Path] = {}


def tiny_source_dir(tmp_path_factory) -> Path:
    """The tiny official-layout checkpoint (with presets); written once per test session."""
    if "src" not in _CACHE:
        _CACHE["src"] = write_tiny_checkpoint(tmp_path_factory.mktemp("cosy2src") / "CosyVoice2-0.5B")["dir"]
    return _CACHE["src"]


def converted_models_dir(tmp_path_factory, model_id: str = "cosyvoice2-tiny") -> Path:
    """``models/`` holding the tiny checkpoint converted with int8 as ``model_id``; built once per session."""
    if model_id not in _CACHE:
        from cosyedge.export.cosyvoice.v2.convert import convert

        root = tmp_path_factory.mktemp("cosy2")
        convert(tiny_source_dir(tmp_path_factory), root / "models" / model_id, quantize="int8")
        _CACHE[model_id] = root / "models"
    return _CACHE[model_id]


# --- the cache for .venv tests (tests/helpers/tiny_models.py) ----------------------------------


def build_cache(out: Path) -> Path:
    """Build the converted tiny model into ``out`` (replacing what is there); returns its models dir.

    Run in a process of its own (:func:`main`): the stamp lists the repository files this process
    has imported, so anything else loaded before would only make the cache go stale more often.
    """
    from cosyedge.export.cosyvoice.v2.convert import convert

    def fill(work: Path) -> dict:
        source = write_tiny_checkpoint(work / "src" / "CosyVoice2-0.5B")["dir"]
        convert(source, tiny_models.models_dir(work) / tiny_models.MODEL_ID, quantize="int8")
        from tests.helpers.legacy_flow_stream import write_packed_copy  # a model converted before issue 31
        write_packed_copy(tiny_models.models_dir(work) / tiny_models.MODEL_ID,
                          tiny_models.legacy_models_dir(work) / tiny_models.PACKED_STREAM_MODEL_ID, source)
        from tests.helpers.cosyvoice1_tiny import convert_all as convert_v1  # the CosyVoice-300M variants
        convert_v1(work / "src" / "v1", tiny_models.models_dir(work))
        return tiny_models.stamp(tiny_models.repo_sources(list(sys.modules.values())))

    return tiny_models.build_in_place(out, fill)


def cached_models_dir(out: Path = tiny_models.DEFAULT_OUT) -> Path:
    """The cache's models dir for tests in this environment (.venv-ref), built first if it is stale."""
    if tiny_models.stale_reason(out, check_versions=True) is not None:
        subprocess.run([sys.executable, "-m", "tests.helpers.cosyvoice_tiny", "--out", str(out)],
                       cwd=REPO, check=True, timeout=900)
    return tiny_models.require(out)


def main(argv: list[str] | None = None) -> int:
    return tiny_models.cache_command(argv, "tests.helpers.cosyvoice_tiny", "the tiny CosyVoice models",
                                     tiny_models.DEFAULT_OUT,
                                     lambda out: tiny_models.stale_reason(out, check_versions=True), build_cache)


if __name__ == "__main__":
    sys.exit(main())
