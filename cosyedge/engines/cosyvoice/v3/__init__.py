"""Fun-CosyVoice3 (v3): its version description (``version``: prompt formats, silent-token rule,
tokenizer specials, languages, DiT token2wav loader) and the causal HiFT vocoder; the engine, LLM and
flow solver are the shared ones of ``common/``."""
