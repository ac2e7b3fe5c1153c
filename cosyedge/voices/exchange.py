"""A saved voice moved between boxes with what was computed for it: export and import.

Export writes the voice file (:mod:`cosyedge.voices.voice_file`) with, for each model the voice is
encoded for (``VoiceInfo.encoded_for``) that is still on the box, the prompt cache's entry for it:
a CosyVoice prompt's encoding, the embedded engine's closest built-in voice. Each carries the
model's weights digest (:func:`cosyedge.catalog.manifest.weights_digest`), the prompt format and
cache-key version it was made under, and the transcript it was keyed with.

Import saves the voice (under the id it had, :meth:`VoiceLibrary.import_file`) and puts each
encoding into the prompt cache under the key this box's own encoding would have, from the voice as
saved here, but only when this box holds a model with that id and that digest and reads that prompt
format and key version; otherwise the encoding is left out (the voice is encoded again at its first
use, as before) and the answer says why. So an import on the same model needs no encoding again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cosyedge.catalog.manifest import model_digest
from cosyedge.engines.base import VoicePrompt
from cosyedge.voices import voice_file
from cosyedge.voices.library import CACHE_VERSION, PromptCache, VoiceInfo, VoiceLibrary
from cosyedge.voices.voice_file import Encoding

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Imported:
    """What an import did: the voice saved, the models whose encodings were reused, and each
    encoding left out with why."""

    info: VoiceInfo
    reused: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict:
        return {"id": self.info.id, "name": self.info.name, "reused": list(self.reused),
                "skipped": [{"model": model, "why": why} for model, why in self.skipped]}


def encodings_of(library: VoiceLibrary, cache: PromptCache, voice_id: str, models_dir: Path) -> list[Encoding]:
    """The prompt cache's entries for a saved voice, one per model it is encoded for and still here
    (the cache may have evicted one: it is then left out)."""
    info = library.get(voice_id)
    prompt, transcript, _ = library.load(voice_id)
    sounds = dict(info.sounds)
    found = []
    for model in info.encoded_for:
        engine, _, model_id = model.partition("/")
        digest = model_digest(models_dir / model_id) if model_id and "/" not in model_id else None
        if digest is None:
            logger.info("export of %s: %s is not on this box; its encoding stays behind", voice_id, model)
            continue
        # the key's transcript: the voice's own on an engine that clones from it, none otherwise
        for keyed in dict.fromkeys(((transcript or "").strip() or None, None)):
            encoded = cache.find(prompt, keyed, engine, model_id)
            if encoded is not None:
                found.append(Encoding(engine=engine, model_id=model_id, model_digest=digest,
                                      prompt_format=VoicePrompt.FORMAT_VERSION, cache_version=CACHE_VERSION,
                                      transcript=keyed, meta=dict(encoded.meta), arrays=dict(encoded.arrays),
                                      sounds=sounds.get(model)))
    return found


def export_voice(library: VoiceLibrary, cache: PromptCache, voice_id: str, models_dir: Path,
                 max_bytes: int | None = None) -> bytes:
    """The voice file with its encodings; the largest are left out while the file would be larger
    than ``max_bytes`` (the limit an import takes), never the voice itself."""
    encodings = encodings_of(library, cache, voice_id, models_dir)
    data = library.export(voice_id, encodings)
    while max_bytes is not None and len(data) > max_bytes and encodings:
        encodings.remove(max(encodings, key=lambda e: sum(a.nbytes for a in e.arrays.values())))
        data = library.export(voice_id, encodings)
    return data


def import_voice(library: VoiceLibrary, cache: PromptCache, data: bytes, models_dir: Path, *, max_bytes: int,
                 name: str | None = None, rename: bool = False, overwrite: bool = False,
                 presets: Iterable[str] = ()) -> Imported:
    """Save the voice of a voice file, and reuse each of its encodings that fits this box."""
    parsed = voice_file.read(data, max_bytes)
    info = library.import_file(parsed, max_bytes=max_bytes, name=name, rename=rename, overwrite=overwrite,
                               presets=presets)
    prompt, _, _ = library.load(info.id)  # the key is of the voice as this box will read it
    reused, skipped = [], list(parsed.refused)
    for encoding in parsed.encodings:
        why = mismatch(encoding, models_dir)
        if why is not None:
            skipped.append((encoding.model, why))
            continue
        cache.put(prompt, encoding.transcript, VoicePrompt(engine=encoding.engine, model_id=encoding.model_id,
                                                           arrays=dict(encoding.arrays), meta=dict(encoding.meta)))
        library.record_encoding(info.id, encoding.engine, encoding.model_id, encoding.sounds)
        reused.append(encoding.model)
    logger.info("imported voice %s: encodings reused for %s; left out: %s", info.id, reused or "none",
                [model for model, _ in skipped] or "none")
    return Imported(info, tuple(reused), tuple(skipped))


def mismatch(encoding: Encoding, models_dir: Path) -> str | None:
    """Why an encoding cannot be reused here, or None when its model, format and key rule match."""
    if encoding.prompt_format != VoicePrompt.FORMAT_VERSION:
        return f"made in prompt format {encoding.prompt_format}; this box reads {VoicePrompt.FORMAT_VERSION}"
    if encoding.cache_version != CACHE_VERSION:
        return f"keyed by cache rule {encoding.cache_version}; this box keys by {CACHE_VERSION}"
    here = model_digest(models_dir / encoding.model_id) if "/" not in encoding.model_id else None
    if here is None:
        return f"no model {encoding.model_id!r} on this box"
    if here != encoding.model_digest:
        return f"the model {encoding.model_id!r} here is another conversion (its weights differ)"
    return None
