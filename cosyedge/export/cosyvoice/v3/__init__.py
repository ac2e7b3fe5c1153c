"""Fun-CosyVoice3-0.5B converter and networks."""
