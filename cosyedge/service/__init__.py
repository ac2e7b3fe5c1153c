"""The request path: the Service facade, the job queue, synthesis, streaming, lessons, history.

May import: root, host, catalog, text, listening, lexicon, engines, instruct, voices
(docs/ARCHITECTURE.md, "Layers").
"""
