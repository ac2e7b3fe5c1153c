"""CosyVoice at run time (onnxruntime + numpy only; torch is never imported here).

``common/`` holds what every version shares and implements it in CosyVoice2's form (the engine, LLM,
flow, HiFT, token2wav, tokenizer, prompt encoders, model directory). Each version's own parts live in
its folder: ``v1/`` (CosyVoice-300M: its engine, LLM, token2wav, tokenizer), ``v2/`` (CosyVoice2-0.5B:
only its description, being the form), ``v3/`` (Fun-CosyVoice3: its description and causal HiFT).
``versions`` is the registry: manifest version -> engine class and version description (``vN/version.py``);
the loader and ``common/`` reach a version only through it, so a new version is a folder plus one line.
"""
