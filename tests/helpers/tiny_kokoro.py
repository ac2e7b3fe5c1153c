"""A tiny ONNX model with Kokoro's exact input/output signature, generated in the test run.

audio[t] = (0.1 + |mean(style)|) * sin(0.05 t) for t < 600 * n_tokens / speed: duration grows with the
token count and shrinks with speed, and the style changes the level, so the engine's plumbing
(ids, style row, speed, trimming, joining) is observable without the real 92 MB model. Built with
``durations=True`` it also has the runtime graph's ``durations`` output: one 600-sample frame per
token (true at speed 1), as setup's derived graph has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.engines.kokoro.sessions import make_session

SAMPLES_PER_TOKEN = 600
#: The packs the presets are mixed from (:mod:`cosyedge.engines.kokoro.presets`).
PACKS = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")


@dataclass
class Sentence:
    """What a fake frontend returns: the engine reads ``phonemes`` (one token per character for the
    tiny model), ``text``, ``language`` and, where present, ``ends_sentence``."""

    text: str
    phonemes: str
    language: str = "en"


def build(path: Path, durations: bool = False) -> Path:
    const = lambda name, value, dtype=np.float32: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, dtype=dtype), name))
    nodes = [
        helper.make_node("Shape", ["tokens"], ["shape"]),
        const("one_idx", [1], np.int64),
        helper.make_node("Gather", ["shape", "one_idx"], ["n_tokens"], axis=0),
        helper.make_node("Cast", ["n_tokens"], ["n_float"], to=TensorProto.FLOAT),
        const("per_token", SAMPLES_PER_TOKEN),
        helper.make_node("Mul", ["n_float", "per_token"], ["len_raw"]),
        helper.make_node("Div", ["len_raw", "speed"], ["len_scaled"]),
        helper.make_node("Cast", ["len_scaled"], ["len_vec"], to=TensorProto.INT64),
        const("zero_axes", [0], np.int64),
        helper.make_node("Squeeze", ["len_vec", "zero_axes"], ["length"]),
        const("start", 0, np.int64),
        const("step", 1, np.int64),
        helper.make_node("Range", ["start", "length", "step"], ["t_int"]),
        helper.make_node("Cast", ["t_int"], ["t"], to=TensorProto.FLOAT),
        const("omega", 0.05),
        helper.make_node("Mul", ["t", "omega"], ["phase"]),
        helper.make_node("Sin", ["phase"], ["wave"]),
        helper.make_node("ReduceMean", ["style"], ["style_mean"], keepdims=0),
        helper.make_node("Abs", ["style_mean"], ["style_abs"]),
        const("base", 0.1),
        helper.make_node("Add", ["style_abs", "base"], ["gain"]),
        helper.make_node("Mul", ["wave", "gain"], ["audio"]),
    ]
    outputs = [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["audio_length"])]
    if durations:
        nodes.append(helper.make_node("Shape", ["tokens"], ["tokens_shape"]))
        nodes.append(helper.make_node("ConstantOfShape", ["tokens_shape"], ["durations"],
                                      value=onnx.numpy_helper.from_array(np.array([1], np.int64))))
        outputs.append(helper.make_tensor_value_info("durations", TensorProto.INT64, [1, "sequence_length"]))
    graph = helper.make_graph(
        nodes, "tiny_kokoro",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "sequence_length"]),
         helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, 256]),
         helper.make_tensor_value_info("speed", TensorProto.FLOAT, [1])],
        outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def engine(directory: Path, frontend: object, seed: int = 0, durations: bool = False, **kwargs) -> KokoroEngine:
    """A KokoroEngine on the tiny model (built in ``directory``, with the durations output when
    ``durations``) with random packs from ``seed`` and the test's ``frontend``; ``kwargs`` go to
    KokoroEngine."""
    rng = np.random.default_rng(seed)
    packs = {name: rng.normal(0, 0.2, (510, 1, 256)).astype(np.float32) for name in PACKS}
    return KokoroEngine(session=make_session(build(directory / "tiny.onnx", durations), 1), packs=packs,
                        frontend=frontend, **kwargs)
