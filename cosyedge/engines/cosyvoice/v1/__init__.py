"""CosyVoice-300M (v1): its own engine (modes sft, zero-shot, cross-lingual, instruct), LLM with the
speaker embedding, non-causal flow with the length regulator, whisper tiktoken tokenizer and its
version description (``version``). It reuses the shared frame and parts of ``common/``."""
