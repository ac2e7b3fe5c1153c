"""The adapters people reach the box through: the Gradio page, REST + OpenAI routes, the Wyoming
server, credentials. They are to reach an engine only through the service (the imports that still
cross are listed in tests/test_imports.py, ``KNOWN_CROSSINGS``).

May import: root, host, catalog, text, listening, instruct, voices, service, ops
(docs/ARCHITECTURE.md, "Layers").
"""
