"""CosyVoice2-0.5B converter."""
