"""Per-language normalization entry point: ``normalize(text, language)``.

Runs after language segmentation, on one run at a time, so each run's numbers and symbols are read
in that run's language ("2024年" in Chinese, "in 2024" in English).
"""

from __future__ import annotations

import logging

from .normalize_en import normalize_en
from .normalize_ja import normalize_ja
from .normalize_zh import normalize_zh

logger = logging.getLogger(__name__)

_NORMALIZERS = {"zh": normalize_zh, "en": normalize_en, "ja": normalize_ja}


def normalize(text: str, language: str) -> str:
    """Numbers, dates, times, money, units and symbols as words of ``language`` (zh, en or ja)."""
    normalizer = _NORMALIZERS.get(language)
    if normalizer is None:
        raise ValueError(f"no normalizer for language {language!r}")
    return normalizer(text)
