"""Fun-CosyVoice3-0.5B converter: its spec, the DiT flow and causal HiFT steps and their networks;
the LLM, frontend and compact steps and the frame are ``common/``'s."""
