"""Language-aware text handling: normalization, language tagging, sentence splitting."""
