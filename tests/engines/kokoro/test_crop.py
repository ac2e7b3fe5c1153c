"""The generator input crop (engines/kokoro/crop.py): the crop rule, the weighted statistics (numba
kernel and the onnxruntime rewrite), the sine phase shift and, on the real model (slow), cropped
against uncropped audio. Setup's check of the crop: tests/export/kokoro/."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.engines.kokoro import crop, fused_runtime, kernels, model_files
from cosyedge.engines.kokoro.engine import open_runtime
from cosyedge.engines.kokoro.graph_index import GraphIndex
from cosyedge.engines.kokoro.silence import trim_silence
from cosyedge.export.kokoro import assembly, checks

RNG = np.random.default_rng(11)


def energy_curve(lead: int, speech: int, tail: int) -> np.ndarray:
    """Silence at -9 (what the model predicts between utterances), speech at 0..3."""
    return np.concatenate([np.full(lead, -9.0), RNG.uniform(0, 3, speech), np.full(tail, -9.0)]).astype(np.float32)


# --- the rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lead, speech, tail", [(22, 60, 50), (21, 100, 47), (23, 35, 60), (20, 7, 55)])
def test_plan_keeps_speech_and_margins_and_islands_that_stand_for_the_removed_frames(lead, speech, tail):
    energy = energy_curve(lead, speech, tail)
    plan = crop.plan_crop(energy)
    frames = energy.size
    start, end = plan.main
    assert start <= lead - crop.MARGIN and end >= lead + speech + crop.MARGIN  # speech + margins kept
    assert plan.segments[0] == (0, crop.LEAD_ISLAND) and plan.segments[-1] == (frames - crop.TAIL_ISLAND, frames)
    assert plan.segments[1] == plan.main and plan.main_at == crop.LEAD_ISLAND
    assert plan.kept == plan.weights.size < frames
    # every removed frame is counted once, on an island's interior frames
    assert np.isclose(plan.weights.sum(), frames)
    assert np.all(plan.weights[:crop.LEAD_EDGE] == 1) and np.all(plan.weights[-crop.TAIL_EDGE:] == 1)
    assert np.all(plan.weights[crop.LEAD_ISLAND:crop.LEAD_ISLAND + end - start] == 1)
    # the seams keep the 2-frame parity of the silence
    assert (start - crop.LEAD_ISLAND) % 2 == 0 and (frames - crop.TAIL_ISLAND - end) % 2 == 0


def test_speech_bounds_keep_a_quiet_tail_but_not_a_quiet_lead():
    """The tail threshold is lower than the lead's: a call's speech may end in a quiet decay (some
    voices' energy sits near -4.5 there) that must not be cut; before the speech such a level is
    still silence."""
    energy = np.full(100, -9.0, np.float32)
    energy[10:20] = -4.5  # lead bump: silence
    energy[20:60] = 1.0
    energy[60:75] = -4.5  # quiet tail: kept
    assert crop.speech_bounds(energy) == (20, 75)
    assert crop.speech_bounds(energy, lead=-6.0, tail=-4.0) == (10, 60)
    assert crop.speech_bounds(np.full(50, -9.0, np.float32)) is None


def test_short_edges_and_silent_calls_are_not_cropped():
    plan = crop.plan_crop(energy_curve(10, 50, 20))  # less silence than island + margin on both sides
    assert plan.segments == ((0, 80),) and plan.main == (0, 80) and np.all(plan.weights == 1)
    x = np.arange(80, dtype=np.float32).reshape(1, 1, 80)
    assert crop.take_frames(x, plan) is x
    silent = crop.plan_crop(np.full(100, -9.0, np.float32))
    assert silent.segments == ((0, 100),) and silent.kept == 100


def test_take_frames_joins_the_kept_ranges():
    plan = crop.plan_crop(energy_curve(30, 40, 60))
    x = np.arange(2 * 130, dtype=np.float32).reshape(1, 2, 130)
    taken = crop.take_frames(x, plan)
    expected = np.concatenate([x[..., s:e] for s, e in plan.segments], axis=-1)
    np.testing.assert_array_equal(taken, expected)
    assert taken.shape[-1] == plan.kept and taken.flags.c_contiguous


def test_phase_shift_gives_the_kept_frames_the_full_runs_phase():
    """The source's CumSum over the cropped per-frame increments + the shift = the full CumSum."""
    f0 = np.concatenate([np.full(30, 9.5), RNG.uniform(90, 300, 40), np.full(60, 11.0)]).astype(np.float32)
    energy = np.where(f0 > 50, 1.0, -9.0).astype(np.float32)
    plan = crop.plan_crop(energy)
    harmonics = np.arange(1, 10, dtype=np.float32)
    ratio = f0[:, None] * harmonics[None, :] / np.float32(24_000)
    step = (ratio - np.floor(ratio)).astype(np.float64)
    full = np.cumsum(step, axis=0)
    cropped = np.cumsum(crop.take_frames(step.T, plan).T, axis=0)
    shift = crop.phase_shift(f0, plan, harmonics, 24_000)
    assert shift.shape == (1, plan.kept, 9)
    np.testing.assert_allclose(cropped + shift[0], crop.take_frames(full.T, plan).T, rtol=1e-6, atol=1e-6)
    whole = crop.plan_crop(np.zeros(130, np.float32))
    assert not np.any(crop.phase_shift(f0, whole, harmonics, 24_000))


@pytest.mark.parametrize("frames, length", [(40, 40), (40, 400), (40, 2401), (7, 601)])
def test_frame_weights_upsample_like_a_floor_nearest_resize(frames, length):
    w = RNG.uniform(0.5, 4, frames).astype(np.float32).reshape(1, 1, frames)
    up = crop.frame_weights(w, length)
    resize = helper.make_node("Resize", ["w", "", "", "sizes"], ["y"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    graph = helper.make_graph([resize], "g", [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1, 1, length], np.int64), "sizes")])
    session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(up, session.run(None, {"w": w})[0].reshape(-1))


# --- weighted statistics ---------------------------------------------------------------------------

def _snake(x, gamma, beta, alpha, weights=None):
    """Pass 1 of the chain kernel: per-channel norm scale/shift and the Snake output's extremes."""
    scales, shifts, mins, maxs = np.empty((4, x.shape[0]), np.float32)
    weighted = weights is not None
    kernels.snake_stats(x, weights if weighted else alpha, weighted, gamma, beta, 1e-5, True, alpha, 1 / alpha,
                        scales, shifts, mins, maxs, 0, x.shape[0])
    return scales, shifts, mins, maxs


def test_weighted_kernel_with_unit_weights_is_the_plain_norm_bit_for_bit():
    x = RNG.normal(3, 2, (6, 517)).astype(np.float32)
    gamma, beta = RNG.uniform(0.5, 2, 6).astype(np.float32), RNG.normal(0, 1, 6).astype(np.float32)
    alpha = RNG.uniform(0.5, 1.5, 6).astype(np.float32)
    plain = _snake(x, gamma, beta, alpha)
    weighted = _snake(x, gamma, beta, alpha, np.ones(517, np.float32))
    for a, b in zip(plain, weighted):
        np.testing.assert_array_equal(a, b)


def test_weighted_kernel_counts_a_frame_of_weight_k_as_k_copies():
    """Weights 3 on some steps == the plain norm of an input where those steps appear 3 times."""
    x = RNG.normal(1, 2, (5, 300)).astype(np.float32)
    weights = np.ones(300, np.float32)
    weights[:20] = 3.0
    repeats = np.concatenate([np.repeat(x[:, :20], 3, axis=1), x[:, 20:]], axis=1)
    gamma, beta = RNG.uniform(0.5, 2, 5).astype(np.float32), RNG.normal(0, 1, 5).astype(np.float32)
    alpha = RNG.uniform(0.5, 1.5, 5).astype(np.float32)
    scales, shifts, _, _ = _snake(x, gamma, beta, alpha, weights)
    scales_rep, shifts_rep, _, _ = _snake(np.ascontiguousarray(repeats), gamma, beta, alpha)
    np.testing.assert_allclose(scales, scales_rep, rtol=1e-5)
    np.testing.assert_allclose(shifts, shifts_rep, rtol=1e-5, atol=1e-6)
    unweighted, _, _, _ = _snake(x, gamma, beta, alpha)
    assert np.max(np.abs(unweighted / scales - 1)) > 1e-3  # the weights do change the statistics


def _norm_model(op: str) -> onnx.ModelProto:
    """x [1, C, T] -> InstanceNormalization or a ReduceMean over time, in the generator's namespace,
    plus the crop's weights input."""
    name = crop.GENERATOR + "block/" + op
    if op == "InstanceNormalization":
        node = helper.make_node(op, ["x", "gamma", "beta"], ["y"], epsilon=1e-5, name=name)
        inits = [numpy_helper.from_array(np.linspace(0.5, 2, 4).astype(np.float32), "gamma"),
                 numpy_helper.from_array(np.linspace(-1, 1, 4).astype(np.float32), "beta")]
    else:
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1, name=name)
        inits = [numpy_helper.from_array(np.array([2], np.int64), "axes")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info(crop.WEIGHTS, TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("op", ["InstanceNormalization", "ReduceMean"])
def test_onnxruntime_weighted_norms_match_the_plain_ones(op):
    """The rewrite of the generator's remaining norms: unit weights give the plain op (to float
    rounding); weight 2 on a frame counts it twice."""
    model = _norm_model(op)
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    graph = model.graph
    node = graph.node[0]
    inits: list = []
    rewrite = crop.weighted_instance_norm(node, inits) if op == "InstanceNormalization" \
        else crop.weighted_reduce_mean(node, GraphIndex(graph))
    del graph.node[:]
    graph.node.extend(rewrite)
    graph.initializer.extend(inits + crop.shared_constants())
    weighted = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.normal(2, 3, (1, 4, 300)).astype(np.float32)
    ones = np.ones((1, 1, 30), np.float32)
    np.testing.assert_allclose(weighted.run(None, {"x": x, crop.WEIGHTS: ones})[0],
                               plain.run(None, {"x": x, crop.WEIGHTS: ones})[0], rtol=1e-5, atol=1e-5)
    w = ones.copy()
    w[..., :5] = 2.0  # frames 0-4 = steps 0-49 count twice
    doubled = np.concatenate([x[..., :50], x], axis=-1)
    expected = plain.run(None, {"x": doubled, crop.WEIGHTS: ones})[0]
    got = weighted.run(None, {"x": x, crop.WEIGHTS: w})[0]
    if op == "InstanceNormalization":
        expected = expected[..., 50:]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_reduce_mean_over_channels_is_refused():
    model = _norm_model("ReduceMean")
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    with pytest.raises(Exception, match="not a time-axis mean"):
        crop.weighted_reduce_mean(model.graph.node[0], GraphIndex(model.graph))


# --- checks and fallbacks ------------------------------------------------------------------------------

def test_speech_at_cut_looks_only_at_edges_that_were_cut():
    audio = np.zeros(3000, np.float32)
    audio[1000:2000] = 0.2  # speech well inside
    assert not crop.speech_at_cut(audio, 300, lead_cut=True, tail_cut=True)
    audio[-100:] = 0.01  # still sounding at the end
    assert crop.speech_at_cut(audio, 300, lead_cut=False, tail_cut=True)
    assert not crop.speech_at_cut(audio, 300, lead_cut=True, tail_cut=False)  # the tail is the call's own end
    audio[:5] = -0.01
    assert crop.speech_at_cut(audio, 300, lead_cut=True, tail_cut=False)


def test_a_graph_that_is_not_the_kokoro_export_is_not_cropped(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["audio"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("audio", TensorProto.FLOAT, None)])
    with pytest.raises(Exception, match="crop: the graph has no"):
        crop.prepare_graph(helper.make_model(graph), weight_instance_norms=False)


def test_a_crop_checked_by_another_version_is_not_used(tmp_path, monkeypatch, caplog):
    opened = []

    class FakeSession:
        def __init__(self, path, threads, crop=False):
            opened.append(crop)

    monkeypatch.setattr(fused_runtime, "FusedSession", FakeSession)
    runner = {"kind": fused_runtime.RUNNER_KIND, "version": fused_runtime.RUNNER_VERSION}
    open_runtime(tmp_path, {"file": "g.onnx", "runner": runner | {"crop": {"version": crop.CROP_VERSION}}}, 1)
    with caplog.at_level(logging.WARNING):
        open_runtime(tmp_path, {"file": "g.onnx", "runner": runner | {"crop": {"version": -1}}}, 1)
    open_runtime(tmp_path, {"file": "g.onnx", "runner": runner}, 1)
    assert opened == [True, False, False] and "another version" in caplog.text


# --- the real model ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runtime_graph(kokoro_models_dir):
    model_dir = assembly.assemble(kokoro_models_dir)
    return model_dir, json.loads((model_dir / "manifest.json").read_text())["runtime_graph"]


@pytest.mark.slow
def test_real_crop_renders_less_and_keeps_the_speech_within_tolerance(runtime_graph):
    """On the real model, two sentences: the cropped runner (numba and onnxruntime chains) returns
    a shorter clip that holds the whole spoken span, within the setup tolerance of the uncropped
    runner over it; the manifest names the crop (setup step 4)."""
    model_dir, graph = runtime_graph
    assert graph["runner"]["crop"]["version"] == crop.CROP_VERSION
    path = model_dir / graph["file"]
    full = fused_runtime.FusedSession(path, 1)
    cropped = fused_runtime.FusedSession(path, 2, crop=True)
    exact = fused_runtime.FusedSession(path, 1, chains="ort", crop=True)
    with np.load(model_dir / model_files.VOICES_NAME) as packs:
        pack = packs["jf_alpha"]
    for ids in (checks.CHECK_TOKENS[:12] + (4,), checks.CHECK_TOKENS):
        feeds = {"tokens": np.array([[0, *ids, 0]], np.int64), "style": pack[len(ids) - 1].reshape(1, 256),
                 "speed": np.array([1.0], np.float32)}
        reference = full.run(None, feeds)[0].reshape(-1)
        for session in (cropped, exact):
            audio, offset = session.run(["audio", crop.OFFSET_OUTPUT], feeds)
            audio, offset = audio.reshape(-1), int(offset)
            assert audio.size < reference.size - 0.3 * 24_000  # at least 0.3 s less rendered audio
            assert checks.check_cropped_audio(reference, audio, offset) < 1.6
            assert abs(trim_silence(audio, 24_000).size - trim_silence(reference, 24_000).size) < 0.01 * 24_000
    for session in (full, cropped, exact):
        session.close()


@pytest.mark.slow
def test_real_crop_that_cuts_speech_renders_the_call_whole(runtime_graph, monkeypatch, caplog):
    """A bounds rule that cuts into the speech (here: margins of -20 frames) is caught by the
    cut-edge check, and the call comes back rendered whole, like the uncropped runner's."""
    model_dir, graph = runtime_graph
    path = model_dir / graph["file"]
    plan = crop.plan_crop
    monkeypatch.setattr(crop, "plan_crop", lambda energy: plan(energy, margin=-20))
    full = fused_runtime.FusedSession(path, 2)
    cropped = fused_runtime.FusedSession(path, 2, crop=True)
    with np.load(model_dir / model_files.VOICES_NAME) as packs:
        pack = packs["jf_alpha"]
    ids = checks.CHECK_TOKENS
    feeds = {"tokens": np.array([[0, *ids, 0]], np.int64), "style": pack[len(ids) - 1].reshape(1, 256),
             "speed": np.array([1.0], np.float32)}
    reference = full.run(None, feeds)[0].reshape(-1)
    with caplog.at_level(logging.INFO, logger="cosyedge.engines.kokoro.fused_runtime"):
        audio, offset = cropped.run(["audio", crop.OFFSET_OUTPUT], feeds)
    assert "rendering this call whole" in caplog.text
    audio = audio.reshape(-1)
    assert int(offset) == 0 and audio.size == reference.size
    assert checks.spectral_distance_db(reference, audio) < checks.SPECTRAL_TOLERANCE_DB
    for session in (full, cropped):
        session.close()
