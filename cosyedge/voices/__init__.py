"""Voices and prompts: the prompt cache, the saved-voice library, consent, prompt transcripts.

May import: root, host, catalog, text, listening, engines (docs/ARCHITECTURE.md, "Layers").
"""
