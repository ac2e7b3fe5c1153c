"""Engines: the embedded Kokoro engine and the CosyVoice ONNX engine, behind one protocol
(``base.Engine``); ``loader.load_engine`` picks and loads the one a model directory needs.

May import: root, host, catalog, text, listening, lexicon (docs/ARCHITECTURE.md, "Layers").
"""
