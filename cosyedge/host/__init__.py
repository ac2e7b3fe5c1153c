"""The box's resources: usable CPUs, heap trimming, free disk, temperature.

May import: root (docs/ARCHITECTURE.md, "Layers").
"""
