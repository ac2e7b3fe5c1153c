"""What every engine offers: the Engine protocol and the plain data it exchanges.

An engine turns text (plus a voice) into float32 audio chunks. It knows nothing of queues, HTTP or
files; the service owns those. Engines are built by a ``load(model_dir, settings)`` factory that does
all file and session work, so tests can build one from fake sessions.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import numpy as np

from cosyedge.notes import Note

#: Called after each sentence with (sentences done, sentences total).
ProgressFn = Callable[[int, int], None]
#: ``step(number, total, stage)`` at the start of each step of a prompt's encoding (1-based;
#: ``stage`` a short code: "encoders", "tokens", "mel", "speaker"), for a progress report.
StepFn = Callable[[int, int, str], None]
#: Returns True when the caller wants the job stopped; checked between sentences.
CancelFn = Callable[[], bool]

LANGUAGES = ("auto", "zh", "en", "ja")
#: Spoken by some models only (Fun-CosyVoice3): a request may name them, and an engine whose
#: ``capabilities.languages`` lacks one refuses it by name (``language_not_supported``).
MORE_LANGUAGES = ("ko", "de", "es", "fr", "it", "ru")
KNOWN_LANGUAGES = LANGUAGES + MORE_LANGUAGES


#: What a prompt becomes on an engine that cannot clone, in the words every adapter uses.
CLOSEST_BUILTIN = "closest built-in voice / 最接近的内置音色"


def closest_builtin(voice: str | None) -> Note:
    """The label of a prompt's voice on an engine that cannot clone: "closest built-in voice /
    最接近的内置音色: <voice>" (no figure: an answer's similarity is measured on its audio)."""
    return Note(f"{CLOSEST_BUILTIN}: {voice}" if voice else CLOSEST_BUILTIN, code="voice_closest_builtin",
                voice=voice)


@dataclass(frozen=True)
class PresetDetail:
    """What one built-in voice is made of in each language it reads (``made_of[language]``): a blend of
    Kokoro voice packs, ``{"packs": {pack: weight}}`` (weights sum to 1), or a speaker of CosyVoice's
    SFT table, ``{"speaker": name}``. ``/voices`` lists them as ``preset_details`` (docs/web.md)."""

    name: str
    made_of: dict[str, dict[str, Any]]
    #: Why a name is listed with nothing in ``made_of``: a seed preset name the engine does not offer
    #: (such a detail comes after the presets' own). Empty for every real preset.
    note: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What an engine can truly do; the UI and API report these, never more."""

    native_clone: bool
    native_instruct: bool
    languages: tuple[str, ...]
    sample_rate: int
    speed_range: tuple[float, float] = (0.5, 2.0)
    #: The longest instruction (characters) the engine takes; before a load the default is the limit.
    max_instruct_chars: int = 500
    #: What each preset is made of, in ``presets()`` order (empty: not described).
    preset_details: tuple[PresetDetail, ...] = ()
    #: The ``quality`` modes the engine offers (CosyVoice: cosyvoice.common.quality); none: the
    #: request's ``quality`` has no effect.
    quality_modes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SynthesisOptions:
    """Per-request options; ``None`` means "the engine's default"."""

    speed: float = 1.0
    language: str = "auto"
    instruct: str | None = None
    seed: int | None = None
    #: Yield audio as it is made (CosyVoice: hop by hop within a sentence) rather than per sentence.
    stream: bool = False
    #: CosyVoice flow steps (None: the mode's, in exact mode the model's: upstream's 10); wins over the mode's.
    n_timesteps: int | None = None
    #: A mode of ``capabilities.quality_modes`` (None: exact, upstream's semantics).
    quality: str | None = None


@dataclass(frozen=True)
class TextAnalysis:
    """An engine's one pass over a request's text: what it will read, in order, and what it will not.

    ``sentences`` are the engine's own units, handed back to ``synthesize`` (Kokoro's phonemized
    sentences, CosyVoice's normalized pieces: one model call each); ``skipped`` says what will not be
    read aloud (other languages' tags, unsupported scripts); ``notes`` where the language setting
    was not applied (text read in its script's language instead). The service reports both.
    """

    text: str
    language: str
    sentences: tuple[Any, ...]
    skipped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class WordTiming:
    """A word of a chunk and when it is heard: seconds from the chunk's first sample (for word
    captions; only engines that know their durations give them: Kokoro)."""

    text: str
    start: float
    end: float


@dataclass
class AudioChunk:
    """One synthesized sentence (or the first clauses of one): mono float32 samples in [-1, 1].

    ``pause_after_s`` is the silence the joiner puts after this chunk when another follows; None
    means the ordinary pause between sentences (``cosyedge.audio.SENTENCE_PAUSE_S``). An engine
    that cuts a sentence at a clause sets the shorter clause pause there and ``ends_sentence=False``
    on the chunk before the cut (captions keep the sentence as one cue). ``continues`` marks a
    streamed piece of a sentence whose next piece follows seamlessly (no pause, no fade between).
    ``words`` time the chunk's words in its own audio, where the engine knows them. ``notes`` are
    added to the answer's notes.
    """

    audio: np.ndarray
    sample_rate: int
    text: str
    index: int
    total: int
    pause_after_s: float | None = None
    continues: bool = False
    #: What the engine did differently for this chunk (:class:`cosyedge.notes.Note`), for the answer.
    notes: tuple[str, ...] = ()
    #: False on a piece of a sentence cut at a clause (the rest of the sentence follows).
    ends_sentence: bool = True
    #: The chunk's words in its own audio (empty when the engine does not know them).
    words: tuple[WordTiming, ...] = ()


@dataclass
class VoicePrompt:
    """An encoded voice, ready for an engine; serializable so it can be cached on disk.

    ``arrays`` hold the numeric parts (embeddings, tokens, style vectors); ``meta`` holds JSON-able
    facts (engine, model id, transcript, similarity scores, what was approximated).
    """

    engine: str
    model_id: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    FORMAT_VERSION = 1

    def to_bytes(self) -> bytes:
        """Serialize as an ``.npz`` with a JSON header array (no pickle)."""
        header = {"version": self.FORMAT_VERSION, "engine": self.engine, "model_id": self.model_id,
                  "meta": self.meta}
        buf = io.BytesIO()
        np.savez(buf, __header__=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                 **self.arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "VoicePrompt":
        """Inverse of :meth:`to_bytes`; raises ``ValueError`` on anything malformed or stale."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                header = json.loads(bytes(npz["__header__"]).decode())
                arrays = {k: npz[k] for k in npz.files if k != "__header__"}
        except Exception as exc:  # zip, json and key errors all mean "not a prompt file"
            raise ValueError(f"not a voice prompt file: {exc}") from exc
        if header.get("version") != cls.FORMAT_VERSION:
            raise ValueError(f"voice prompt version {header.get('version')} is not {cls.FORMAT_VERSION}")
        return cls(engine=header["engine"], model_id=header["model_id"], arrays=arrays,
                   meta=header.get("meta", {}))


@runtime_checkable
class Engine(Protocol):
    """The protocol the service programs against."""

    name: str
    model_id: str
    capabilities: Capabilities

    def presets(self) -> list[str]:
        """Names of built-in voices, in display order."""

    def encode_prompt(self, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                      cancelled: CancelFn | None = None, step: StepFn | None = None) -> VoicePrompt:
        """Encode conditioned prompt audio into a reusable VoicePrompt; an encoding that takes long
        (CosyVoice's prompt encoders: seconds) stops early (raise CancelledError) when ``cancelled()``
        and says each of its steps as it starts (``step``); a quick one may say none."""

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        """Clean, split and read ``text`` once, for ``language`` (a request's ``options.language``);
        raise TextError when nothing in it can be read."""

    def synthesize(self, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
                   progress: ProgressFn | None = None,
                   cancelled: CancelFn | None = None) -> Iterator[AudioChunk]:
        """Yield chunks in order as they are made (one per sentence, or per clause group when an
        engine cuts a long first sentence); stop early (raise CancelledError) when ``cancelled()``.

        ``text`` is the text itself or this engine's :meth:`analyze` of it, whose sentences are then
        read as they are (the text is not cleaned and split again)."""

    def close(self) -> None:
        """Release sessions and memory."""

