"""What every CosyVoice version shares at run time."""
