"""Keeping an installed box healthy: the output janitor and the self-test.

May import: root, host, catalog, text, listening, engines, instruct, voices, service
(docs/ARCHITECTURE.md, "Layers").
"""
