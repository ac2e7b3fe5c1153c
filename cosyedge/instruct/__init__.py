"""Natural-language instructions: the plan of explicit controls and the audio effects.

May import: root, host, catalog, text, listening, engines (docs/ARCHITECTURE.md, "Layers").
"""
