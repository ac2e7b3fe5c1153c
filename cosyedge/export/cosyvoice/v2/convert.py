"""Convert an official CosyVoice2-0.5B checkpoint directory into a cosyedge ONNX model directory.

Input (as downloaded): ``cosyvoice2.yaml``, ``flow.pt``, ``hift.pt`` (+ the LLM files, handled by the
LLM step), optionally ``flow.decoder.estimator.fp32.onnx``. Output: ONNX graphs, small numpy side files
and ``manifest.json`` listing every file with its sha256.

CosyVoice2 is the form the shared export parts implement: its :data:`SPEC` is the shared steps of
:mod:`cosyedge.export.cosyvoice.common.pipeline` in order, run by that module's frame.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cosyedge.export.cosyvoice.common import pipeline
from cosyedge.export.cosyvoice.common.pipeline import ExportStep, ModelSpec
from cosyedge.export.cosyvoice.common.upstream_config import CONFIG_NAME

logger = logging.getLogger(__name__)

#: The model family and version a conversion writes into its manifest (schema: cosyedge.catalog.manifest).
FAMILY, VERSION = pipeline.FAMILY, 2
#: The manifest's ``licence`` (docs/models.md): the terms of the converted weights, shown by the model
#: picker. Third parties state Apache-2.0 for the official weights; the model card is the authority.
LICENCE = {"weights": "Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B; see its model card)",
           "code": "Apache-2.0 (FunAudioLLM/CosyVoice)"}

#: Export steps in the order they run.
EXPORT_STEPS: list[tuple[str, ExportStep]] = [
    ("flow", pipeline.flow_step),
    ("hift", pipeline.hift_step),
    ("llm", pipeline.llm_step),
    ("frontend", pipeline.frontend_step),
    ("compact", pipeline.compact_step),
]

#: The checkpoint files each step reads, checked before any step runs (a file missing for the last
#: step would otherwise show only after the minutes the others take).
STEP_SOURCES: dict[str, tuple[str, ...]] = {
    "flow": ("flow.pt",),
    "hift": ("hift.pt",),
    "llm": ("llm.pt", "CosyVoice-BlankEN/config.json"),
    "frontend": ("campplus.onnx", "speech_tokenizer_v2.onnx"),
}

SPEC = ModelSpec(version=VERSION, label="CosyVoice2-0.5B", config_name=CONFIG_NAME,
                 steps=tuple(EXPORT_STEPS), sources=STEP_SOURCES, licence=LICENCE,
                 other_configs={"cosyvoice3.yaml": "cosyvoice3", "cosyvoice.yaml": "cosyvoice1"})


def convert(src: Path, out: Path, quantize: str = "none", steps: list[str] | None = None,
            force: bool = False, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the CosyVoice2 export steps from ``src`` into ``out``; returns the manifest written there.

    ``steps`` picks a subset by name (default: all). ``force`` replaces an existing ``out``.
    ``options`` are step-specific choices (``llm_bits``, ``speech_tokenizer_int8``).
    """
    return pipeline.convert(src, out, SPEC, quantize=quantize, steps=steps, force=force, options=options)
