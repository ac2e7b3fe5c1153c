"""Embedded engine: Kokoro-82M int8 ONNX with per-language G2P and bundled voice packs."""
