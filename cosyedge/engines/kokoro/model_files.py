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
FIX_HINT = "run `python -m cosyedge setup-model` (after `pip install -r requirements.txt`)"
