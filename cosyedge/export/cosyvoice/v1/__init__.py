"""CosyVoice-300M (v1) converter and networks."""
