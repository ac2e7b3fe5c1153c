"""What every CosyVoice version shares at run time, in the form CosyVoice2 defines: the engine frame and
its modes (``engine``), the speech LLM and sampling, the flow and HiFT (``token2wav``, streaming
``hops``), text tokenizer and normalization, prompt encoders and features, the model directory and
thread planning. A version's particulars come from its description through
:mod:`cosyedge.engines.cosyvoice.versions`; nothing here imports a version folder."""
