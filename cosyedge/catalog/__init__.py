"""Model folders: manifests (a model's identity and files) and the catalog of installed models."""
