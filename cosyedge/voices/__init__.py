"""Voices and prompts: the prompt cache, the saved-voice library, consent, prompt transcripts."""
