"""cosyedge: an offline voice-cloning text-to-speech studio for small edge boxes.

Importing this package does nothing heavy; engines, onnxruntime and the web stack load on use.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
