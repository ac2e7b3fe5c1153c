"""CosyVoice2-0.5B (v2): the form the shared parts in ``common/`` implement; only its version
description lives here (``version``: languages, tokenizer specials, prompt formats, token2wav loader)."""
