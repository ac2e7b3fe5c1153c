"""Fun-CosyVoice3 (v3): what differs from the shared parts."""
