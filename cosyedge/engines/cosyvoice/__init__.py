"""CosyVoice ONNX runtime (onnxruntime + numpy only; torch is never imported here).

Modules: ``manifest`` (model directory, sessions), ``features`` (prompt mel, Kaldi fbank), ``flow``
(tokens -> mel), ``hift`` (mel -> waveform), ``token2wav`` (both). The engine facade and the LLM/frontend
parts live beside them.
"""
