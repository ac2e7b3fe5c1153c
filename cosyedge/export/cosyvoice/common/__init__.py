"""Export parts every CosyVoice version shares, in CosyVoice2's form: the conversion frame
(``pipeline``), flow, HiFT and LLM export with their networks, quantization and the yaml reader.
Nothing here imports a version folder; the versions import from here."""
