"""Model folders: manifests (a model's identity and files) and the catalog of installed models.

May import: root, host (docs/ARCHITECTURE.md, "Layers").
"""
