"""The closest built-in voice: what a prompt becomes on the embedded engine, which cannot clone.

Kokoro has no cloning, so a prompt is not imitated: it selects one voice of a fixed table, the five
presets, each described by what it sounds like on three fixed lines (English, Chinese, Japanese, read
with the preset's own recipe per language): its median F0 and its speaker d-vector
(:mod:`cosyedge.listening.speaker`). The table is measured once, offline (``save_table``,
``scripts/make_voice_table.py``) and stored next to this module; a table made for other packs,
presets or encoder is not used (measured again at the first prompt, with a warning).

The rule, measured on the prompt (both in well under a second):

* its median F0 (:mod:`cosyedge.listening.pitch`) bounds the choice: a voice qualifies when its
  median F0 is within a factor ``BAND`` (1.5) of the speaker's and on the same side of ``SIDE_HZ``
  (165 Hz, between typical male and female speech);
* of the voices that qualify, the one with the best score is chosen: the cosine of its d-vector and
  the prompt's, less ``PITCH_WEIGHT`` (0.5) times the distance of their F0 in log Hz (an octave off
  costs 0.35). Two presets can be about as close to a voice by the d-vector alone (male_1 and male_2
  to a low diphone voice: 0.32 and 0.32), and then the pitch keeps the choice from flipping between two
  recordings of one speaker; the weight was chosen on the team's own reference voices by an
  independent speaker encoder (docs/benchmarks.md, "Closest built-in voice").

Only one bundled pack is male (jm_kumo): ``male_1`` (~99 Hz) and ``male_2`` (~120 Hz) cover speakers
from ~66 Hz to 165 Hz, ``female_2`` (~239 Hz) every speaker from 165 Hz to ~358 Hz. When no voice
qualifies (a speaker below ~66 Hz or above ~500 Hz), the voice nearest in F0 on the speaker's side
is chosen and the answer says so; when no pitch can be measured (a whisper, noise), the d-vector
alone chooses and the answer says that too. No listening check and no search run: the choice is a
preset, so it reads every language as that preset does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.engines.base import SynthesisOptions, VoicePrompt, closest_builtin
from cosyedge.engines.kokoro import presets
from cosyedge.listening.pitch import median_f0
from cosyedge.listening.speaker import SpeakerEncoder, cosine, shared_encoder
from cosyedge.notes import Note

logger = logging.getLogger(__name__)

METHOD = "closest built-in voice"
#: Bump when the rule or the table's lines change: a cached choice of another version is made again.
VERSION = 1
#: Between typical male (85-155 Hz) and female (165-255 Hz) speaking pitch.
SIDE_HZ = 165.0
#: How far a voice's median F0 may be from the speaker's, as a factor either way.
BAND = 1.5
#: What one unit of |ln(voice F0 / speaker F0)| costs a voice's d-vector cosine.
PITCH_WEIGHT = 0.5
#: What each table voice is measured on: one line per language it reads, ~2-3 s each.
TABLE_LINES = (("en", "We will meet at the library after lunch, and then walk home together."),
               ("zh", "我们下午三点在学校门口见面，然后一起去图书馆。"),
               ("ja", "きのうは友だちと駅まで歩きました。"))
TABLE_FILE = Path(__file__).with_name("voice_table.npz")
_MEMO_ATTR = "_closest_voice_table"
#: What an encoding made before this rule was (a saved voice whose choice was never recorded).
LEGACY_METHOD = "approximate voice match"

IN_BAND, NEAREST_PITCH, NO_PITCH = "in_band", "nearest_pitch", "no_pitch"


@dataclass(frozen=True)
class TableVoice:
    """One voice of the table: a preset, its median F0 (Hz) and unit d-vector on ``TABLE_LINES``."""

    name: str
    f0_hz: float
    embedding: np.ndarray


@dataclass(frozen=True)
class Choice:
    """The voice chosen for a prompt and why (``rule``: IN_BAND, NEAREST_PITCH or NO_PITCH)."""

    voice: str
    rule: str
    prompt_f0_hz: float | None
    voice_f0_hz: float
    similarity: float  # d-vector cosine of the prompt and the voice's table lines
    score: float  # similarity less the pitch distance (PITCH_WEIGHT)


def same_side(speaker_hz: float, voice_hz: float) -> bool:
    return (speaker_hz < SIDE_HZ) == (voice_hz < SIDE_HZ)


def qualifies(speaker_hz: float, voice_hz: float) -> bool:
    """The F0 rule: within a factor BAND of the speaker's median F0 and on the same side of SIDE_HZ."""
    return same_side(speaker_hz, voice_hz) and 1.0 / BAND <= voice_hz / speaker_hz <= BAND


def choose(table: list[TableVoice], embedding: np.ndarray, f0_hz: float) -> Choice:
    """The voice of ``table`` for a prompt with this d-vector and median F0 (nan: not measured)."""
    sims = {v.name: cosine(embedding, v.embedding) for v in table}
    if not (math.isfinite(f0_hz) and f0_hz > 0):
        best = max(table, key=lambda v: sims[v.name])
        return Choice(best.name, NO_PITCH, None, best.f0_hz, sims[best.name], sims[best.name])
    scores = {v.name: sims[v.name] - PITCH_WEIGHT * abs(math.log(v.f0_hz / f0_hz)) for v in table}
    fit = [v for v in table if qualifies(f0_hz, v.f0_hz)]
    if fit:
        best = max(fit, key=lambda v: scores[v.name])
        rule = IN_BAND
    else:
        near = [v for v in table if same_side(f0_hz, v.f0_hz)] or table
        best = min(near, key=lambda v: abs(math.log(v.f0_hz / f0_hz)))
        rule = NEAREST_PITCH
    return Choice(best.name, rule, round(f0_hz, 1), best.f0_hz, sims[best.name], scores[best.name])


def table_fingerprint(engine: Any) -> str:
    """What the table depends on: the packs, the presets and their recipes, the lines, the encoder."""
    from cosyedge.listening.speaker import encoder_path

    h = hashlib.sha256(json.dumps({"version": VERSION, "lines": TABLE_LINES, "presets": presets.PRESETS,
                                   "recipes": repr(presets.LANGUAGE_RECIPES), "model": engine.model_id,
                                   "encoder_bytes": encoder_path().stat().st_size},
                                  sort_keys=True).encode())
    for name in sorted(engine.packs):
        h.update(name.encode())
        h.update(np.ascontiguousarray(engine.packs[name], dtype="<f4").tobytes())
    return h.hexdigest()


def measure_table(engine: Any, encoder: SpeakerEncoder | None = None) -> list[TableVoice]:
    """Read ``TABLE_LINES`` with every preset (seconds per preset): median F0 over all lines, the
    d-vector as the normalized mean of the lines' d-vectors."""
    encoder = encoder or shared_encoder()
    rate = engine.capabilities.sample_rate
    out = []
    for name in engine.presets():
        pieces, embeddings = [], []
        for language, text in TABLE_LINES:
            chunks = engine.synthesize(text, name, SynthesisOptions(language=language))
            audio = np.concatenate([c.audio for c in chunks])
            pieces.append(audio)
            embeddings.append(encoder.embed(audio, rate))
        mean = np.mean(embeddings, axis=0)
        out.append(TableVoice(name, round(median_f0(np.concatenate(pieces), rate), 1),
                              (mean / np.linalg.norm(mean)).astype(np.float32)))
    return out


def save_table(engine: Any, path: Path = TABLE_FILE) -> list[TableVoice]:
    """Measure the table and store it (``scripts/make_voice_table.py``)."""
    table = measure_table(engine)
    np.savez(path, names=np.array([v.name for v in table]), f0=np.array([v.f0_hz for v in table]),
             embeddings=np.stack([v.embedding for v in table]),
             fingerprint=np.frombuffer(table_fingerprint(engine).encode(), dtype=np.uint8))
    return table


def load_table(engine: Any, path: Path = TABLE_FILE) -> list[TableVoice] | None:
    """The stored table, or None when it is absent, unreadable or made for another model/encoder."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            if bytes(npz["fingerprint"]).decode() != table_fingerprint(engine):
                logger.warning("the voice table %s was made for other voices; measuring it again", path.name)
                return None
            return [TableVoice(str(n), float(f), e.astype(np.float32))
                    for n, f, e in zip(npz["names"], npz["f0"], npz["embeddings"])]
    except (OSError, KeyError, ValueError) as exc:
        logger.warning("no usable voice table (%s); measuring it again", exc)
        return None


def voice_table(engine: Any) -> list[TableVoice]:
    """The engine's table: the stored one when it matches, else measured now (once per engine)."""
    table = engine.__dict__.get(_MEMO_ATTR)
    if table is None:
        table = load_table(engine) or measure_table(engine)
        engine.__dict__[_MEMO_ATTR] = table
    return table


def closest_voice(engine: Any, audio: np.ndarray, sample_rate: int,
                  encoder: SpeakerEncoder | None = None) -> VoicePrompt:
    """The prompt's closest built-in voice, as a VoicePrompt that reads like that preset."""
    encoder = encoder or shared_encoder()
    choice = choose(voice_table(engine), encoder.embed(audio, sample_rate), median_f0(audio, sample_rate))
    logger.info("%s: %s (%s; prompt %s Hz, voice %.0f Hz, d-vector %.3f)", METHOD, choice.voice, choice.rule,
                choice.prompt_f0_hz, choice.voice_f0_hz, choice.similarity)
    meta = {"method": METHOD, "version": VERSION, "preset_voice": choice.voice, "rule": choice.rule,
            "prompt_f0_hz": choice.prompt_f0_hz, "voice_f0_hz": choice.voice_f0_hz,
            "table_similarity": round(choice.similarity, 4), "score": round(choice.score, 4)}
    return VoicePrompt(engine=engine.name, model_id=engine.model_id, meta=meta)


def is_current(meta: dict) -> bool:
    """Whether an encoding is this rule's choice (else an older one: it is made again)."""
    return (meta.get("method") == METHOD and meta.get("version") == VERSION
            and meta.get("preset_voice") in presets.PRESETS)


def sounded(meta: dict) -> str:
    """What an encoding sounds like, in one name: the preset it reads as, or LEGACY_METHOD for one
    made by the removed voice match (its own blend or adaptation; an empty meta counts as one too)."""
    if meta.get("method") == METHOD or (meta.get("preset_voice") in presets.PRESETS
                                        and not meta.get("adaptation")):
        return str(meta.get("preset_voice"))
    return LEGACY_METHOD


def label(voice: str) -> Note:
    """What the answer calls the voice a prompt became, in both languages."""
    return closest_builtin(voice)


def notes(meta: dict) -> list[Note]:
    """The answer's notes on a chosen voice: why it is outside the pitch band or chosen without a
    pitch, and, the first time an older encoding is replaced, that the voice's sound changed."""
    out = []
    voice, rule = meta.get("preset_voice"), meta.get("rule")
    if rule == NEAREST_PITCH:
        out.append(Note(f"no built-in voice is within {BAND}x of the prompt's pitch ({meta['prompt_f0_hz']:.0f} Hz): "
                        f"{voice} ({meta['voice_f0_hz']:.0f} Hz) is the nearest in pitch",
                        code="closest_voice_outside_band", voice=voice, prompt_f0_hz=meta["prompt_f0_hz"],
                        voice_f0_hz=meta["voice_f0_hz"]))
    elif rule == NO_PITCH:
        out.append(Note(f"no pitch could be measured in the prompt: {voice} was chosen by the sound of the "
                        "voice alone", code="closest_voice_no_pitch", voice=voice))
    before = meta.get("changed_from")
    if before:
        was = (f"the {METHOD} {before}" if before in presets.PRESETS
               else f"made by the {LEGACY_METHOD}, which is gone")
        out.append(Note(f"this voice sounds different from before: it was {was}; it is now the {METHOD} {voice}",
                        code="voice_sound_changed", before=before, voice=voice))
    return out
