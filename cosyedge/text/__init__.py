"""Kokoro's text handling: cleanup, language tagging, normalization, sentence splitting, G2P helpers.

Used by the Kokoro frontend (``cosyedge.engines.kokoro``). CosyVoice does not use this package: its
text must match what upstream CosyVoice's own frontend feeds the model, so its normalizer and
splitter live in its engine (``cosyedge.engines.cosyvoice.common.text_normalize``). Each engine has one home
for its text rules; neither borrows the other's.

May import: root, host, catalog (docs/ARCHITECTURE.md, "Layers").
"""
