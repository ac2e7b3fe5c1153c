"""The box's ears: offline speech recognition, the speaker encoder, pronunciation scoring.

May import: root, host, catalog, text (docs/ARCHITECTURE.md, "Layers").
"""
