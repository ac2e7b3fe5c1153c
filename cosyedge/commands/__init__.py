"""One module per CLI command; see cosyedge/cli.py. Like the web adapters they reach an engine only
through the service; ``setup-model`` and ``convert`` import the build-time package inside their
handlers.

May import: root, host, catalog, text, listening, instruct, voices, service, ops, export
(docs/ARCHITECTURE.md, "Layers").
"""
