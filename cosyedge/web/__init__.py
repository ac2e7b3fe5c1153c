"""The adapters people reach the box through: the Gradio page, REST + OpenAI routes, the Wyoming
server, credentials. They reach an engine only through the service.

May import: root, host, catalog, text, listening, instruct, voices, service, ops
(docs/ARCHITECTURE.md, "Layers").
"""
