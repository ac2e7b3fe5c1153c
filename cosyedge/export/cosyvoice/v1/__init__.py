"""CosyVoice-300M (v1) converter: its spec and steps (LLM, non-causal flow with length regulator,
whisper tokenizer, variants) and its networks; the frame, HiFT and quantization are ``common/``'s."""
