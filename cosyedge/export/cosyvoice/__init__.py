"""Build time: converting official CosyVoice checkpoints (torch, inside functions only).

``common/`` holds what every version's converter shares, in CosyVoice2's form: the conversion frame
(``pipeline``: context, spec, steps, temporary folder, manifest), the flow, HiFT and Qwen2 LLM export
steps with their networks, quantization and the upstream yaml reader. Each version's folder holds its
``convert`` module (its :class:`~.common.pipeline.ModelSpec` and ``convert``) and its own networks:
``v1/`` (CosyVoice-300M), ``v2/`` (CosyVoice2-0.5B: the shared steps in order), ``v3/`` (Fun-CosyVoice3:
DiT flow, causal HiFT). ``versions`` is the registry the convert command dispatches through.
"""
