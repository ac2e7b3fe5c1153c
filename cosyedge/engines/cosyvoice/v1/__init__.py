"""CosyVoice-300M (v1): what differs from the shared parts."""
