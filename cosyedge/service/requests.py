"""The request path's plain data: what an adapter asks (:class:`TTSRequest`), each stage of it
(:class:`PreparedRequest` after the engine-free checks, :class:`ResolvedRequest` against the loaded
engine, with its :class:`VoiceChoice`), what it gives back (:class:`TTSResult`), the status line
(:class:`ServiceStatus`), and the job phases the page words. No behaviour beyond reporting."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.audio import ConditionedPrompt
from cosyedge.engines.base import KNOWN_LANGUAGES, Capabilities, SynthesisOptions, TextAnalysis, VoicePrompt
from cosyedge.engines.cosyvoice.common import quality
from cosyedge.host.thermal import ThermalSnapshot
from cosyedge.instruct.plan import InstructPlan
from cosyedge.service.captions import Captions
from cosyedge.service.jobs import QueueStats
from cosyedge.voices.transcripts import ClonePlan, PromptTranscript

#: A job's phase while its prompt or saved voice is conditioned and encoded (cache miss: seconds).
PHASE_PREPARING_VOICE = "preparing the voice…"
PHASE_LOADING = "loading model…"
PHASE_SYNTHESIZING = "synthesizing"
PHASE_SCORING = "scoring similarity"
PHASE_TRANSCRIBING = "transcribing the prompt…"

#: What a request's ``language`` may name: "auto" or a language some engine speaks (the engine that
#: runs the job refuses one it lacks, by name). The CLI's ``--lang`` offers these.
REQUEST_LANGUAGES = KNOWN_LANGUAGES
#: Speed range accepted before the engine is loaded (every engine supports at least this).
SPEED_RANGE = Capabilities(native_clone=False, native_instruct=False, languages=(),
                           sample_rate=0).speed_range
#: The seed's preset names; shown before the engine has been loaded once.
SEED_PRESETS = ("female_1", "female_2", "male_1", "male_2", "child")
#: Client-chosen job ids (so a REST client can cancel its own pending request).
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Upstream CosyVoice's flow-matching steps (``flow.inference`` hard-codes 10).
UPSTREAM_FLOW_STEPS = quality.UPSTREAM_FLOW_STEPS
#: The ``quality`` modes a request and the server default may name, checked before an engine loads
#: (an engine that has none ignores the field with a note); defined in engines/cosyvoice/common/quality.py.
QUALITY_NAMES = quality.QUALITY_NAMES
DEFAULT_QUALITY = quality.DEFAULT_QUALITY


@dataclass(frozen=True)
class TTSRequest:
    """One synthesis request, as the UI and every REST route express it."""

    text: str
    speaker: str | None = None  # a preset name; None = the engine's first preset
    voice_id: str | None = None  # a saved voice (library lands with the voice-prompt issue)
    prompt_audio: bytes | None = None  # raw bytes of an audio file (WAV, FLAC, OGG, MP3)
    prompt_text: str | None = None  # transcript of the prompt audio
    instruct: str | None = None
    speed: float = 1.0
    language: str = "auto"
    keep_file: bool = False  # write outputs/<job-id>.wav (the UI serves that file)
    consent: bool = False  # the user confirmed the prompt's speaker agreed (needed with prompt_audio)
    flow_steps: int | None = None  # CosyVoice flow-matching steps (None: the mode's); wins over the mode's
    quality: str | None = None  # a mode of QUALITY_NAMES (None: the server's default, Settings.quality)


@dataclass(frozen=True)
class VoiceChoice:
    """The voice handed to the engine and how it relates to what the client asked for."""

    voice: str | VoicePrompt  # a preset name or an encoded prompt
    name: str  # shown to the user: the preset, saved voice or "prompt audio"
    match: str  # "preset", "native clone", "closest built-in voice / 最接近的内置音色: female_2"
    similarity: float | None = None  # speaker similarity of the result to the prompt, when measured
    prompt: ConditionedPrompt | None = None  # the conditioned prompt audio, when one was used
    #: A native clone's prompt transcript (typed or heard, cosyedge.voices.transcripts) and its mode.
    transcript: PromptTranscript | None = None
    clone: ClonePlan | None = None

    @property
    def encoded(self) -> VoicePrompt | None:
        """The encoded prompt handed to the engine; None for a preset."""
        return self.voice if isinstance(self.voice, VoicePrompt) else None


@dataclass(frozen=True)
class PreparedRequest:
    """A request after ``Service.prepare``: checked once (everything that needs no engine) and
    its prompt audio decoded and conditioned once. The job's worker and the CLI take it from here
    (``Service.resolve``)."""

    request: TTSRequest
    prompt: ConditionedPrompt | None = None  # the conditioned ``prompt_audio``, when one was sent


@dataclass(frozen=True)
class ResolvedRequest:
    """A prepared request resolved against the loaded engine, each part once: the voice, the options
    with the instruction folded in, the engine's one pass over the text (what synthesis reads, what
    the report says was skipped and where the language setting was not applied), and the notes."""

    choice: VoiceChoice
    options: SynthesisOptions
    plan: InstructPlan | None
    analysis: TextAnalysis
    notes: list[str]  # request fields ignored (ignored_inputs), then the engine's language notes
    skipped: list[str]  # text not read aloud (TextAnalysis.skipped)
    clone_mode: str | None = None  # a native clone's mode: zero_shot, cross_lingual, instruct

    def transcript_report(self) -> dict[str, Any] | None:
        """The prompt transcript the answer returns (typed or heard), None without a native clone."""
        heard = self.choice.transcript
        return heard.as_dict() if heard is not None and self.clone_mode is not None else None


@dataclass
class TTSResult:
    """The audio and a truthful account of how it was made."""

    job_id: str
    audio: np.ndarray
    sample_rate: int
    engine: str
    model_id: str
    voice: str  # the preset or voice actually used
    voice_match: str  # "native clone", "none: preset ... used; ...", "preset"
    instruct: dict[str, Any]  # {"applied", "not_supported", "controls", "message"} (cosyedge.instruct.plan)
    sentences: int
    seconds: float  # wall time of the synthesis
    path: Path | None = None
    similarity: float | None = None  # see VoiceChoice.similarity
    notes: list[str] = field(default_factory=list)  # see ResolvedRequest.notes
    skipped: list[str] = field(default_factory=list)  # text not read aloud (TextAnalysis.skipped)
    transcript: dict[str, Any] | None = None  # see ResolvedRequest.transcript_report
    clone_mode: str | None = None  # see ResolvedRequest.clone_mode
    #: One cue per sentence at the returned audio's offsets (words where the engine times them).
    captions: Captions = field(default_factory=Captions)
    #: The page's caption files next to its WAV, by format ("srt", "vtt"); empty without a file.
    caption_files: dict[str, Path] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return len(self.audio) / float(self.sample_rate) if self.sample_rate else 0.0

    def report(self) -> dict[str, Any]:
        """The JSON-able account, shared by the UI panel and the REST body."""
        return {"job_id": self.job_id, "engine": self.engine, "model": self.model_id,
                "voice": self.voice, "voice_match": self.voice_match,
                "similarity": self.similarity, "instruct": self.instruct,
                "notes": list(self.notes), "skipped": list(self.skipped),
                "sentences": self.sentences, "duration": round(self.duration, 3),
                "sample_rate": self.sample_rate, "seconds": round(self.seconds, 3),
                "transcript": self.transcript, "clone_mode": self.clone_mode}


@dataclass(frozen=True)
class ServiceStatus:
    """What the status line and /health show."""

    engine: str
    model: str
    model_state: str  # "not loaded", "loading model…", "loaded", "missing: <why>"
    queue: QueueStats
    thermal: ThermalSnapshot
    position: int | None = None  # the asking session's place in the waiting list
    own_phase: str | None = None  # the asking session's job phase, e.g. "sentence 2/5"

    def line(self) -> str:
        """One human line, English first (the UI labels carry the Chinese)."""
        t = self.thermal
        thermal = (f"temperature {t.temp_c:.0f} °C ({t.state}): {t.message}" if t.temp_c is not None
                   else f"temperature: {t.message}")
        parts = [f"engine {self.engine} · model {self.model}: {self.model_state}",
                 f"jobs running {self.queue.running}/{self.queue.limit}, "
                 f"waiting {self.queue.waiting}/{self.queue.max_waiting}"]
        if self.position is not None:
            parts.append(f"your position: {self.position}")
        elif self.own_phase:
            parts.append(f"your job: {self.own_phase}")
        parts.append(thermal)
        return " | ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        t = self.thermal
        return {"engine": self.engine, "model": self.model, "model_state": self.model_state,
                "loaded": self.model_state == "loaded",
                "queue": {"running": self.queue.running, "waiting": self.queue.waiting,
                          "concurrency": self.queue.concurrency, "limit": self.queue.limit,
                          "max_waiting": self.queue.max_waiting, "held": self.queue.held},
                "thermal": {"state": t.state, "temp_c": t.temp_c, "message": t.message,
                            "max_concurrency": t.max_concurrency, "hold_new": t.hold_new,
                            "refuse_new": t.refuse_new}}
