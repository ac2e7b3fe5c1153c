"""Export steps every CosyVoice version shares."""
