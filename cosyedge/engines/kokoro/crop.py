"""Generator input crop for the fused Kokoro runner (for speed): render less edge silence.

Every Kokoro call renders ~0.27 s of silence before the speech and ~0.65 s after it, which the
engine then trims. The vocoder (``/decoder/decoder/generator``) is ~75 % of a call and costs the
same per frame whether the frame is silent or not, so this module cuts its input down before it
runs. Three things make the cropped audio match the full run's (see docs/bench-log/kokoro.md "Generator
input crop" for the measurements behind each):

* **Which frames.** The speech span comes from the predicted energy curve ``N`` (known before the
  decoder): from the first frame above ``LEAD_THRESHOLD`` to the last above ``TAIL_THRESHOLD``,
  plus ``MARGIN`` frames each side (the vocoder's receptive field). Of the silence outside, two
  *islands* are kept: the first ``LEAD_ISLAND`` frames and the last ``TAIL_ISLAND`` frames of the
  call. Their outermost frames (``LEAD_EDGE``,
  ``TAIL_EDGE``) reproduce the full run's own boundary frames, which are 2-3x larger than the
  interior silence; the rest of each island is interior silence. Seams keep the frame parity (the
  decoder's 2x upsampling leaves a 2-frame pattern in the silence).
* **Weighted statistics.** Every time-axis normalization of the generator (the instance norms of the
  conv-input chains, the shared-statistics AdaIN ``ReduceMean`` pairs) uses per-frame weights
  ``w``: 1 for kept frames, and on the islands' interior frames the removed frames' count spread
  over them, so each norm sees the full run's silence share (nearest-upsampled to each tensor's
  length). With all weights 1 it is the plain norm.
* **Sine phase.** The source module integrates F0 over frames (``CumSum``) and feeds the phase of
  its harmonics to the network; the removed frames' phase increments are added back after the
  ``CumSum`` (``phase_shift``), so the kept frames see the full run's phase.

The output is cut to the main span (speech + margins): the islands' audio is dropped, and the
runner reports where the cut audio sits in the uncropped output (``OFFSET_OUTPUT``, for checks).
The bounds rule is measured, not proven: if the returned audio is still loud at an edge that was
cut (``CUT_SPEECH``), the runner renders that call again whole (``WHOLE``), so an unusual voice or
speed costs time, never the end of a word.

``prepare_graph`` rewrites a runtime graph in place for this when the runner loads (host steps
``CropInputs`` and ``CropOutput`` in the ``HOST_DOMAIN`` domain, which ``fused_runtime.FusedSession``
runs in Python); the file on disk stays the one setup checked. Setup's check of the crop is
``cosyedge.export.kokoro.checks.check_cropped_audio``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosyedge.engines.kokoro.graph_index import GraphIndex
from cosyedge.engines.kokoro.silence import SILENCE_THRESHOLD
from cosyedge.errors import EngineError

logger = logging.getLogger(__name__)

CROP_VERSION = 1  # bump when the rule or the graph rewrite change: setup-model checks the crop again
HOST_DOMAIN = "cosyedge.host"
GENERATOR = "/decoder/decoder/generator/"
# Generator inputs in Kokoro-82M v1.0's export (the decoder's output, F0 and energy curves).
X_INPUT = "/decoder/decoder/decode.3/Div_4_output_0"
F0_INPUT = "/decoder/decoder/Unsqueeze_output_0"
ENERGY_INPUT = "/decoder/decoder/Unsqueeze_1_output_0"
WEIGHTS = "crop/weights"
PHASE_SHIFT = "crop/phase_shift"
SPAN = "crop/span"
OFFSET_OUTPUT = "crop_offset"
#: Optional feed: render this call whole (the runner's second try when a cut edge is not silent).
WHOLE = "crop/whole"
#: CropOutput's flag: the returned audio is loud within ``CUT_CHECK_FRAMES`` of an edge that was cut,
#: i.e. the speech may go on past the cut; the runner then renders the call whole.
CUT_SPEECH = "crop/cut_speech"
CUT_CHECK_FRAMES = 1

# Predicted energy N above these: speech (silence sits at -5 to -10 depending on the voice). Lower
# than needed on purpose: the end of a call's speech must never be cut (measured: docs/bench-log/kokoro.md).
LEAD_THRESHOLD = -4.0
TAIL_THRESHOLD = -5.0
MARGIN = 6
LEAD_ISLAND, LEAD_EDGE = 8, 4
TAIL_ISLAND, TAIL_EDGE = 18, 12


@dataclass(frozen=True)
class CropPlan:
    """Which frames of the generator input are kept, and how each counts in the statistics.

    ``segments``: (start, end) frame ranges of the full input, in order; ``weights``: one per kept
    frame; ``main``: the kept range of the speech + margins as (start, end) in *full* frames;
    ``main_at``: where that range starts in the cropped input."""

    frames: int
    segments: tuple[tuple[int, int], ...]
    weights: np.ndarray
    main: tuple[int, int]
    main_at: int

    @property
    def kept(self) -> int:
        return sum(end - start for start, end in self.segments)


def speech_bounds(energy: np.ndarray, lead: float = LEAD_THRESHOLD,
                  tail: float = TAIL_THRESHOLD) -> tuple[int, int] | None:
    """First frame whose predicted energy is above ``lead`` and one past the last above ``tail``
    (None: no frame is above either)."""
    energy = np.asarray(energy, np.float32).reshape(-1)
    first, last = np.flatnonzero(energy > lead), np.flatnonzero(energy > tail)
    if first.size == 0 or last.size == 0:
        return None
    return int(first[0]), max(int(last[-1]) + 1, int(first[0]) + 1)


def plan_crop(energy: np.ndarray, margin: int = MARGIN, lead: tuple[int, int] = (LEAD_ISLAND, LEAD_EDGE),
              tail: tuple[int, int] = (TAIL_ISLAND, TAIL_EDGE),
              thresholds: tuple[float, float] = (LEAD_THRESHOLD, TAIL_THRESHOLD)) -> CropPlan:
    """The crop for a call whose per-frame predicted energy is ``energy`` (the generator's frames).

    An edge is cropped only if it has more silence than its island; otherwise it is kept whole."""
    frames = int(np.asarray(energy).size)
    bounds = speech_bounds(energy, *thresholds)
    if bounds is None:
        return _whole(frames)
    (lead_keep, lead_edge), (tail_keep, tail_edge) = lead, tail
    start, end = max(0, bounds[0] - margin), min(frames, bounds[1] + margin)
    start = max(0, start - (start - lead_keep) % 2)  # the seam continues the 2-frame pattern
    end = min(frames, end + (frames - tail_keep - end) % 2)
    segments: list[tuple[int, int]] = []
    weights: list[np.ndarray] = []
    if start > lead_keep:
        island = np.ones(lead_keep, np.float32)
        island[lead_edge:] = (start - lead_edge) / (lead_keep - lead_edge)
        segments.append((0, lead_keep))
        weights.append(island)
    else:
        start = 0
    main_at = sum(e - s for s, e in segments)
    if frames - end <= tail_keep:
        end = frames
    segments.append((start, end))
    weights.append(np.ones(end - start, np.float32))
    if end < frames:
        island = np.ones(tail_keep, np.float32)
        island[:tail_keep - tail_edge] = (frames - end - tail_edge) / (tail_keep - tail_edge)
        segments.append((frames - tail_keep, frames))
        weights.append(island)
    return CropPlan(frames, tuple(segments), np.concatenate(weights), (start, end), main_at)


def _whole(frames: int) -> CropPlan:
    return CropPlan(frames, ((0, frames),), np.ones(frames, np.float32), (0, frames), 0)


def take_frames(tensor: np.ndarray, plan: CropPlan) -> np.ndarray:
    """The kept frames (last axis) of a [.., frames] tensor, contiguous."""
    if tensor.shape[-1] != plan.frames:
        raise EngineError(f"crop: tensor has {tensor.shape[-1]} frames, the plan {plan.frames}")
    if len(plan.segments) == 1 and plan.segments[0] == (0, plan.frames):
        return tensor
    return np.ascontiguousarray(np.concatenate([tensor[..., s:e] for s, e in plan.segments], axis=-1))


def phase_shift(f0: np.ndarray, plan: CropPlan, harmonics: np.ndarray, sample_rate: float) -> np.ndarray:
    """[1, kept, H] phase (in cycles per sample, as the source's CumSum sums them) of the removed
    frames before each kept frame: what the CumSum over the cropped F0 misses. The per-frame
    increment is the graph's ``frac(f0 * h / sample_rate)``."""
    f0 = np.asarray(f0, np.float32).reshape(-1)
    ratio = (f0[:, None] * harmonics.astype(np.float32)[None, :]) / np.float32(sample_rate)
    step = (ratio - np.floor(ratio)).astype(np.float64)
    kept = np.zeros(f0.size, bool)
    for s, e in plan.segments:
        kept[s:e] = True
    missed = np.cumsum(np.where(kept[:, None], 0.0, step), axis=0)
    return take_frames(missed.T, plan).T[None].astype(np.float32)


# --- graph rewrite -------------------------------------------------------------------------------


@dataclass
class Source:
    """The sine source's constants, read from the graph (harmonic multipliers, sample rate)."""

    harmonics: np.ndarray
    sample_rate: float


def prepare_graph(model: Any, weight_instance_norms: bool) -> Source:
    """Rewrite ``model``'s graph (in place) to run its generator on a cropped input (module docstring).

    ``weight_instance_norms``: also rewrite the generator's InstanceNormalization nodes into weighted
    onnxruntime subgraphs (when the chains run on onnxruntime); otherwise the fused chain kernels
    weight them (``mark_weighted_chains``). Raises EngineError if the graph is not the expected
    export (then the runner runs uncropped)."""
    from onnx import TensorProto, helper

    graph = model.graph
    index = GraphIndex(graph)  # built before the rewrite below: producers and constants as exported
    producer = index.producer
    for name in (X_INPUT, F0_INPUT, ENERGY_INPUT):
        if name not in producer:
            raise EngineError(f"crop: the graph has no {name!r}")
    if [o.name for o in graph.output][:1] != ["audio"]:  # durations may follow; they pass through
        raise EngineError("crop: the graph's first output is not 'audio'")
    source = _sine_source(graph, index)
    readers = 0
    for node in graph.node:
        if node.name.startswith(GENERATOR):
            for i, name in enumerate(node.input):
                if name in (X_INPUT, F0_INPUT):
                    node.input[i] = name + "/cropped"
                    readers += 1
    if readers < 2:
        raise EngineError("crop: the generator does not read the decoder output and F0")
    nodes = list(graph.node)
    cumsum = next(n for n in nodes if n.op_type == "CumSum" and n.name.startswith(GENERATOR))
    summed = cumsum.output[0]
    cumsum.output[0] = summed + "/cropped"
    shift = helper.make_node("Add", [summed + "/cropped", PHASE_SHIFT], [summed], name=GENERATOR + "crop/phase_shift")
    audio = producer["audio"]
    audio.output[0] = "audio/uncut"
    crop_in = helper.make_node("CropInputs", [X_INPUT, F0_INPUT, ENERGY_INPUT],
                               [X_INPUT + "/cropped", F0_INPUT + "/cropped", WEIGHTS, PHASE_SHIFT, SPAN],
                               name="crop/CropInputs", domain=HOST_DOMAIN)
    crop_out = helper.make_node("CropOutput", ["audio/uncut", SPAN], ["audio", OFFSET_OUTPUT, CUT_SPEECH],
                                name="crop/CropOutput", domain=HOST_DOMAIN)
    rewritten: list = [crop_in]
    inits: list = []
    counts = {"reduce_mean": 0, "instance_norm": 0}
    for node in nodes:
        if node.name.startswith(GENERATOR) and node.op_type == "ReduceMean":
            rewritten += weighted_reduce_mean(node, index)
            counts["reduce_mean"] += 1
        elif node.name.startswith(GENERATOR) and node.op_type == "InstanceNormalization" and weight_instance_norms:
            rewritten += weighted_instance_norm(node, inits)
            counts["instance_norm"] += 1
        else:
            rewritten.append(node)
        if node is cumsum:
            rewritten.append(shift)
    rewritten.append(crop_out)
    del graph.node[:]
    graph.node.extend(rewritten)
    graph.initializer.extend(inits + shared_constants())
    graph.output.append(helper.make_tensor_value_info(OFFSET_OUTPUT, TensorProto.INT64, []))
    host_types = {X_INPUT + "/cropped": TensorProto.FLOAT, F0_INPUT + "/cropped": TensorProto.FLOAT,
                  WEIGHTS: TensorProto.FLOAT, PHASE_SHIFT: TensorProto.FLOAT, SPAN: TensorProto.INT64,
                  CUT_SPEECH: TensorProto.BOOL}
    graph.value_info.extend(helper.make_tensor_value_info(name, kind, None) for name, kind in host_types.items())
    model.opset_import.append(helper.make_opsetid(HOST_DOMAIN, 1))  # for shape inference; never run by onnxruntime
    logger.debug("crop: generator input cut, %s weighted", counts)
    return source


def _sine_source(graph: Any, index: GraphIndex) -> Source:
    """Harmonic multipliers and sample rate from the source's Mul -> Div before its CumSum."""
    value, producer = index.value, index.producer
    cumsums = [n for n in graph.node if n.op_type == "CumSum" and n.name.startswith(GENERATOR)]
    if len(cumsums) != 1:
        raise EngineError(f"crop: expected one CumSum in the generator, found {len(cumsums)}")
    seen = {}
    node = cumsums[0]
    for _ in range(12):  # walk up the first non-constant input: Transpose, Resize, Sub, Div, Mul
        data = next((name for name in node.input if name and value(name) is None), None)
        node = producer.get(data) if data else None
        if node is None:
            break
        seen.setdefault(node.op_type, node)
        if node.op_type == "Mul" and "Div" in seen:
            break
    div, mul = seen.get("Div"), seen.get("Mul")
    if div is None or mul is None:
        raise EngineError("crop: the sine source is not Mul(harmonics) -> Div(sample rate) -> CumSum")
    rate = next((value(n) for n in div.input if value(n) is not None), None)
    harmonics = next((value(n) for n in mul.input if value(n) is not None), None)
    if rate is None or rate.size != 1 or harmonics is None:
        raise EngineError("crop: the sine source's constants are not where expected")
    return Source(harmonics.astype(np.float32).reshape(-1), float(rate.reshape(-1)[0]))


def _upsampled_weights(like: str, tag: str) -> tuple[list, str, str]:
    """Nodes giving WEIGHTS nearest-upsampled to ``like``'s time length ([1, 1, T]) and their sum."""
    from onnx import helper

    shape, sizes, up, total = (f"{tag}/{s}" for s in ("shape", "sizes", "w", "w_sum"))
    nodes = [helper.make_node("Shape", [like], [shape], start=2, end=3),
             helper.make_node("Concat", ["crop/one_one", shape], [sizes], axis=0),
             helper.make_node("Resize", [WEIGHTS, "", "", sizes], [up], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("ReduceSum", [up, "crop/time_axis"], [total], keepdims=1)]
    return nodes, up, total


def _weighted_mean(x: str, w: str, w_sum: str, out: str, tag: str) -> list:
    from onnx import helper

    return [helper.make_node("Mul", [x, w], [f"{tag}/wx"]),
            helper.make_node("ReduceSum", [f"{tag}/wx", "crop/time_axis"], [f"{tag}/sum"], keepdims=1),
            helper.make_node("Div", [f"{tag}/sum", w_sum], [out])]


def _time_axis_only(node: Any, index: GraphIndex) -> None:
    axes = index.value(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if axes is None:
        raise EngineError(f"crop: {node.name} has no constant axes")
    keep = {a.name: a.i for a in node.attribute}.get("keepdims", 1)
    if axes.reshape(-1).tolist() not in ([2], [-1]) or keep != 1:
        raise EngineError(f"crop: {node.name} is not a time-axis mean")


def weighted_reduce_mean(node: Any, index: GraphIndex) -> list:
    """ReduceMean over time -> sum(w * x) / sum(w)."""
    _time_axis_only(node, index)
    tag = "crop/" + node.name
    nodes, w, total = _upsampled_weights(node.input[0], tag)
    return nodes + _weighted_mean(node.input[0], w, total, node.output[0], tag)


def weighted_instance_norm(node: Any, inits: list) -> list:
    """InstanceNormalization(x, gamma, beta) -> the same with weighted mean and variance."""
    from onnx import helper, numpy_helper

    x, gamma, beta = node.input
    eps = float({a.name: helper.get_attribute_value(a) for a in node.attribute}.get("epsilon", 1e-5))
    tag = "crop/" + node.name
    inits.append(numpy_helper.from_array(np.array(eps, np.float32), f"{tag}/eps"))
    nodes, w, total = _upsampled_weights(x, tag)
    nodes += _weighted_mean(x, w, total, f"{tag}/mean", tag + "/m")
    nodes += [helper.make_node("Sub", [x, f"{tag}/mean"], [f"{tag}/d"]),
              helper.make_node("Mul", [f"{tag}/d", f"{tag}/d"], [f"{tag}/d2"])]
    nodes += _weighted_mean(f"{tag}/d2", w, total, f"{tag}/var", tag + "/v")
    nodes += [helper.make_node("Add", [f"{tag}/var", f"{tag}/eps"], [f"{tag}/ve"]),
              helper.make_node("Sqrt", [f"{tag}/ve"], [f"{tag}/sd"]),
              helper.make_node("Div", [f"{tag}/d", f"{tag}/sd"], [f"{tag}/z"]),
              helper.make_node("Unsqueeze", [gamma, "crop/channel_axis"], [f"{tag}/g"]),
              helper.make_node("Unsqueeze", [beta, "crop/channel_axis"], [f"{tag}/b"]),
              helper.make_node("Mul", [f"{tag}/z", f"{tag}/g"], [f"{tag}/zg"]),
              helper.make_node("Add", [f"{tag}/zg", f"{tag}/b"], node.output[:1])]
    return nodes


def shared_constants() -> list:
    """The initializers the rewritten nodes share."""
    from onnx import numpy_helper

    return [numpy_helper.from_array(np.array([1, 1], np.int64), "crop/one_one"),
            numpy_helper.from_array(np.array([2], np.int64), "crop/time_axis"),
            numpy_helper.from_array(np.array([1], np.int64), "crop/channel_axis")]


def mark_weighted_chains(chains: list) -> int:
    """Give every fused chain whose instance norm is the generator's the crop weights (the kernel
    then computes weighted statistics); return how many. Call before the chains drop their nodes."""
    marked = 0
    for chain in chains:
        norm = next((n for n in chain.nodes if n.op_type == "InstanceNormalization"), None)
        if chain.gamma is not None and norm is not None and norm.name.startswith(GENERATOR):
            chain.weights = WEIGHTS
            marked += 1
    return marked


# --- host steps ------------------------------------------------------------------------------------


class CropInputs:
    """Host step: the plan from the energy curve; cropped x and F0, weights, phase shift, span."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.inputs = [X_INPUT, F0_INPUT, ENERGY_INPUT]
        self.outputs = [X_INPUT + "/cropped", F0_INPUT + "/cropped", WEIGHTS, PHASE_SHIFT, SPAN]

    def run(self, tensors: dict[str, np.ndarray], state: Any = None) -> dict[str, np.ndarray]:
        x, f0, energy = (tensors[name] for name in self.inputs)
        frames = x.shape[-1]
        if f0.shape[-1] != frames or energy.shape[-1] != frames:
            raise EngineError(f"crop: x has {frames} frames, F0 {f0.shape[-1]}, energy {energy.shape[-1]}")
        plan = _whole(frames) if WHOLE in tensors else plan_crop(energy)
        start, end = plan.main
        span = np.array([plan.main_at, plan.main_at + end - start, start, plan.kept, frames], np.int64)
        return {X_INPUT + "/cropped": take_frames(x, plan), F0_INPUT + "/cropped": take_frames(f0, plan),
                WEIGHTS: plan.weights.reshape(1, 1, -1),
                PHASE_SHIFT: phase_shift(f0, plan, self.source.harmonics, self.source.sample_rate),
                SPAN: span}


class CropOutput:
    """Host step: the audio of the main span only, its sample offset in the uncropped output, and
    whether it is loud next to an edge that was cut (``CUT_SPEECH``)."""

    def __init__(self) -> None:
        self.inputs = ["audio/uncut", SPAN]
        self.outputs = ["audio", OFFSET_OUTPUT, CUT_SPEECH]

    def run(self, tensors: dict[str, np.ndarray], state: Any = None) -> dict[str, np.ndarray]:
        audio = tensors["audio/uncut"]
        first, last, offset_frames, kept, frames = (int(v) for v in tensors[SPAN])
        hop = audio.shape[-1] // kept
        if hop * kept != audio.shape[-1]:
            raise EngineError(f"crop: {audio.shape[-1]} samples are not a whole number of {kept} frames")
        main = np.ascontiguousarray(audio[..., first * hop:last * hop])
        cut = speech_at_cut(main.reshape(-1), hop * CUT_CHECK_FRAMES, lead_cut=offset_frames > 0,
                            tail_cut=offset_frames + last - first < frames)
        return {"audio": main, OFFSET_OUTPUT: np.array(offset_frames * hop, np.int64),
                CUT_SPEECH: np.array(cut)}


def speech_at_cut(audio: np.ndarray, edge: int, lead_cut: bool, tail_cut: bool) -> bool:
    """Whether ``audio`` has a sample ``trim_silence`` would count as sound within ``edge`` samples
    of a side that was cut (``lead_cut``/``tail_cut``)."""
    return bool((lead_cut and np.any(np.abs(audio[:edge]) > SILENCE_THRESHOLD))
                or (tail_cut and np.any(np.abs(audio[-edge:]) > SILENCE_THRESHOLD)))


def frame_weights(weights: np.ndarray, length: int) -> np.ndarray:
    """``weights`` [1, 1, frames] nearest-upsampled to ``length`` steps (step ``i`` takes frame
    ``floor(i * frames / length)``, as the rewritten graph's Resize does), as float32. Most
    generator tensors are a whole multiple of the frames; the source branch's are one step longer."""
    w = np.asarray(weights, np.float32).reshape(-1)
    if length < w.size:
        raise EngineError(f"crop: a tensor of {length} steps is shorter than its {w.size} frames")
    return w[(np.arange(length, dtype=np.int64) * w.size) // length]
