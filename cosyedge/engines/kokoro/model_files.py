"""The embedded Kokoro model directory as the engine reads it: its id and file names.

``models/kokoro-int8/`` holds the shipped int8 graph, the voice packs, the phoneme vocabulary, the
runtime graph derived from the shipped one at setup, and a manifest naming the graph to load
(``runtime_graph``). Setup (``python -m cosyedge setup-model``) builds it:
``cosyedge.export.kokoro.assembly``.
"""

from __future__ import annotations

MODEL_ID = "kokoro-int8"
ONNX_NAME = "kokoro-v1.0.int8.onnx"
VOICES_NAME = "voices_ja.npz"
VOCAB_NAME = "vocab.json"
SAMPLE_RATE = 24_000
#: The runtime graph's per-token durations (predictor frames, [1, N+2] int64 with the two pads), an
#: output setup adds (``export/kokoro/optimize.expose_durations``); older graphs lack it.
DURATIONS_OUTPUT = "durations"
#: Audio samples per duration frame (the decoder's hop times its upsampling): sum(durations) * 600 is
#: the uncropped call's length.
SAMPLES_PER_FRAME = 600
FIX_HINT = "run `python -m cosyedge setup-model` (after `pip install -r requirements.txt`)"
