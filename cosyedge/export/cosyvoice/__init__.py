"""Build time: converting official CosyVoice checkpoints, shared steps and one folder per version."""
