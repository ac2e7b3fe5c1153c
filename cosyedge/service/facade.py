"""The facade that the UI and the REST API share: prepare, queue, synthesize, report honestly.

* :class:`EngineHolder` loads the engine on first use (nothing heavy at start), counts its users, and
  releases it after ``idle_unload_minutes`` without use so the memory returns to the system.
* :class:`Service` turns a :class:`TTSRequest` into a job on the one :class:`~cosyedge.service.jobs.JobQueue`
  and says in the :class:`TTSResult` exactly what the engine did (preset used instead of a clone,
  which parts of an instruction were applied and which not, ...).

One request path, shared by the job's worker and the CLI: :meth:`Service.prepare` checks a request
once and decodes its prompt once (before the queue, no engine needed) into a
:class:`PreparedRequest`; :meth:`Service.resolve` turns that, with the loaded engine, into a
:class:`ResolvedRequest`: the voice (``_resolve_voice``: a preset, or a prompt or saved voice
encoded through the prompt cache), the instruction (``_plan_instruct``, :mod:`cosyedge.instruct.plan`),
the notes, and the engine's one pass over the text (``Engine.analyze``), which synthesis reads and
the report quotes; :func:`write_wav` writes a result, mapping a full disk in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import gc
import hashlib
import logging
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from cosyedge.service import history
from cosyedge.listening.asr import Recognizer
from cosyedge.audio import PROMPT_ADVICE, ConditionedPrompt, condition_prompt, write_wav_atomic
from cosyedge.config import Settings
from cosyedge.voices.consent import require_consent
from cosyedge.host.diskspace import DiskGuard, FreeProbe, free_bytes
from cosyedge.engines.loader import NATIVE_ABILITIES
from cosyedge.engines.base import (KNOWN_LANGUAGES, MORE_LANGUAGES, CancelFn, Capabilities, Engine, SynthesisOptions,
                                   TextAnalysis, VoicePrompt)
from cosyedge.errors import (AudioError, BusyError, CancelledError, ConflictError, CosyedgeError,
                             ModelMissingError, NameError_, NotFoundError, ParameterError, StorageFullError,
                             TextError)
from cosyedge.files import TEMP_PREFIX
from cosyedge.host.heap import return_large_blocks, trim_heap
from cosyedge.instruct.plan import (MAX_INSTRUCTION_CHARS, NO_INSTRUCTION, InstructPlan, apply_plan,
                               plan_for_engine, postprocess)
from cosyedge.listening.intelligibility import reading_notes, text_languages
from cosyedge.service.jobs import Job, JobQueue, QueueStats, ThermalSource
from cosyedge.service.lessons import (Lesson, LessonPlan, LessonResult, load_lesson, read_lesson,
                              synthesize_lesson)
from cosyedge.catalog.manifest import read_identity
from cosyedge.catalog.models import ModelCatalog, ModelInfo
from cosyedge.notes import Note
from cosyedge.service.streaming import AudioStream, StreamInfo
from cosyedge.service.synthesis import check_text
from cosyedge.service.synthesis import stream as stream_pieces
from cosyedge.service.synthesis import synthesize
from cosyedge.host.thermal import ThermalSnapshot
from cosyedge.host.update_state import Deployment, UpdateStatus
from cosyedge.voices.transcripts import SOURCE_HEARD, SOURCE_USER, ClonePlan, PromptTranscript, clone_plan, hear
from cosyedge.voices.library import MAX_TRANSCRIPT_CHARS, PromptCache, VoiceInfo, VoiceLibrary
from cosyedge.voices.library import refuse_preset_name

logger = logging.getLogger(__name__)

#: A job's phase while its prompt or saved voice is conditioned and encoded (cache miss: seconds).
PHASE_PREPARING_VOICE = "preparing the voice…"
PHASE_LOADING = "loading model…"
PHASE_SYNTHESIZING = "synthesizing"
PHASE_SCORING = "scoring similarity"
PHASE_TRANSCRIBING = "transcribing the prompt…"
#: Heard transcripts kept in memory by prompt audio (a prompt sent again is not heard again).
HEARD_CACHE_ENTRIES = 32

#: Speed range accepted before the engine is loaded (every engine supports at least this).
SPEED_RANGE = Capabilities(native_clone=False, native_instruct=False, languages=(),
                           sample_rate=0).speed_range
#: The seed's preset names; shown before the engine has been loaded once.
SEED_PRESETS = ("female_1", "female_2", "male_1", "male_2", "child")
#: Client-chosen job ids (so a REST client can cancel its own pending request).
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: How long a UI client may still download a finished WAV before the janitor may remove it.
DOWNLOAD_LEASE_S = 30 * 60

EngineFactory = Callable[[], Engine]


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
    flow_steps: int | None = None  # CosyVoice flow-matching steps (None: the model's, upstream's 10)


@dataclass(frozen=True)
class VoiceChoice:
    """The voice handed to the engine and how it relates to what the client asked for."""

    voice: str | VoicePrompt  # a preset name or an encoded prompt
    name: str  # shown to the user: the preset, saved voice or "prompt audio"
    match: str  # "preset", "native clone", "approximate voice match: similarity ... -> ..."
    similarity: float | None = None  # speaker similarity of the result to the prompt, when measured
    prompt: ConditionedPrompt | None = None  # the conditioned prompt audio, when one was used
    #: A native clone's prompt transcript (typed or heard, cosyedge.voices.transcripts) and its mode.
    transcript: PromptTranscript | None = None
    clone: ClonePlan | None = None


@dataclass(frozen=True)
class PreparedRequest:
    """A request after :meth:`Service.prepare`: checked once (everything that needs no engine) and
    its prompt audio decoded and conditioned once. The job's worker and the CLI take it from here
    (:meth:`Service.resolve`)."""

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


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc keeps them otherwise)."""
    gc.collect()
    trim_heap()


class EngineHolder:
    """Owns the one engine instance: lazy load, user count, idle unload.

    ``use()`` loads the engine if needed (one loader at a time; others wait), counts the caller as a
    user and yields the engine. ``unload_if_idle()`` releases it only when nobody uses it and the
    last use ended ``idle_seconds`` ago (0 = never unload).
    """

    def __init__(self, factory: EngineFactory, idle_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._cond = threading.Condition()
        self._engine: Engine | None = None
        self._loading = False
        self._releasing = False  # between dropping the engine and the memory being returned
        self._users = 0
        self._last_used = clock()
        self.loads = 0
        self.unloads = 0
        # Facts remembered across unloads, so status and /voices need no reload.
        self.name: str | None = None
        self.model_id: str | None = None
        self.presets: list[str] | None = None
        self.capabilities: Capabilities | None = None

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    @property
    def state(self) -> str:
        with self._cond:
            if self._engine is not None:
                return "loaded"
            if self._releasing:
                return "releasing memory…"
            return "loading model…" if self._loading else "not loaded"

    @contextlib.contextmanager
    def use(self, on_loading: Callable[[], None] | None = None) -> Iterator[Engine]:
        """Yield the loaded engine for the duration of one job."""
        with self._cond:
            self._users += 1
            while self._loading or self._releasing:
                self._cond.wait()
            must_load = self._engine is None
            if must_load:
                self._loading = True
        try:
            if must_load:
                if on_loading is not None:
                    on_loading()
                self._load()
            engine = self._engine
            assert engine is not None  # internal invariant: set by _load or kept alive by _users
            yield engine
        finally:
            with self._cond:
                self._users -= 1
                self._last_used = self._clock()
                self._cond.notify_all()

    def _load(self) -> None:
        started = time.monotonic()
        try:
            engine = self._factory()
        except BaseException:
            with self._cond:
                self._loading = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._engine = engine
            self._loading = False
            self.loads += 1
            self.name = engine.name
            self.model_id = engine.model_id
            self.capabilities = engine.capabilities
            self.presets = list(engine.presets())
            self._cond.notify_all()
        logger.info("engine %s (%s) loaded in %.1f s", engine.name, engine.model_id,
                    time.monotonic() - started)

    def forget(self) -> None:
        """Drop the facts remembered of the last engine (after :meth:`unload`, before another
        model is served: its name, presets and capabilities are not the next model's)."""
        with self._cond:
            self.name = self.model_id = None
            self.presets = None
            self.capabilities = None

    def unload_if_idle(self) -> bool:
        """Release the engine when unused for ``idle_seconds``; True when it was released."""
        if self.idle_seconds <= 0:
            return False
        with self._cond:
            if (self._engine is None or self._users or self._loading
                    or self._clock() - self._last_used < self.idle_seconds):
                return False
        return self.unload()

    def unload(self) -> bool:
        """Release the engine now unless a job uses it; True when it was released."""
        with self._cond:
            if self._engine is None or self._users or self._loading:
                return False
            engine, self._engine = self._engine, None
            self._releasing = True
            self.unloads += 1
        try:
            engine.close()
        except Exception:
            logger.exception("engine close failed; dropping it anyway")
        finally:
            del engine
            release_memory()
            with self._cond:
                self._releasing = False
                self._cond.notify_all()
        logger.info("engine unloaded after %.0f s idle", self.idle_seconds)
        return True


class Service:
    """What the UI and the REST API call. One instance per process, built by app.py."""

    def __init__(self, settings: Settings, engine_factory: EngineFactory | None = None,
                 thermal: ThermalSource | None = None,
                 clock: Callable[[], float] = time.monotonic, disk_probe: FreeProbe = free_bytes,
                 recognizer: Recognizer | None = None, deployment: Deployment | None = None) -> None:
        self.settings = settings
        # The commit this process started on and the OTA update's state, for /health.
        self.deployment = deployment or Deployment.of_this_code()
        # The app's one speech recognizer (cosyedge.listening.asr): loaded on first use, released when idle;
        # prompt transcripts and the Kokoro voice-match guard both listen through it.
        self.recognizer = recognizer or Recognizer.for_models(settings.models_path, settings.threads,
                                                              settings.asr_idle_seconds)
        self._heard: dict[tuple[str, str], PromptTranscript] = {}
        self._heard_lock = threading.Lock()
        # Refuses new jobs, saves and uploads while the disk is nearly full (disk_probe: a test seam).
        self.disk = DiskGuard((settings.outputs_path, settings.prompts_path),
                              int(settings.min_free_disk_mb * 1e6), probe=disk_probe)
        if engine_factory is None:
            def engine_factory() -> Engine:
                from cosyedge.engines.loader import load_engine

                return load_engine(self.engine_settings())
        self.holder = EngineHolder(functools.partial(self._load_engine, engine_factory),
                                   settings.idle_unload_minutes * 60.0, clock)
        # Prompt cache and saved voices live under prompts/ (never swept by the output janitor).
        self.prompt_cache = PromptCache(settings.prompts_path / "cache")
        self.library = VoiceLibrary(settings.prompts_path / "library")
        self.catalog = ModelCatalog(settings.models_path)
        self.queue = JobQueue(settings.concurrency, settings.queue_size, thermal)
        self._in_use_lock = threading.Lock()
        self._writing: set[Path] = set()
        self._leases: dict[Path, float] = {}
        self._stop = threading.Event()
        self._idle_thread: threading.Thread | None = None
        # Per owner, one flag per submission still being checked (a prompt is conditioned before it
        # is queued): a cancel in that moment sets them, and the job is cancelled once queued.
        self._submitting: dict[str, set[threading.Event]] = {}
        self._submitting_lock = threading.RLock()

    def _load_engine(self, factory: EngineFactory) -> Engine:
        """The factory's engine, given the service's recognizer when it listens to its own voices
        (``listen_with``: the Kokoro voice-match guard)."""
        engine = factory()
        listen_with = getattr(engine, "listen_with", None)
        if callable(listen_with):
            listen_with(self.recognizer.transcribe)
        return engine

    def engine_settings(self) -> Settings:
        """Settings for the next engine load: fewer ONNX threads while the thermal governor asks.

        ONNX Runtime fixes a session's threads when it is created, so the thermal limit applies
        from the next load on (after an idle unload), not to an engine already loaded.
        """
        threads = self.queue.thermal_snapshot().onnx_threads
        if threads is None or threads >= self.settings.threads:
            return self.settings
        return dataclasses.replace(self.settings, onnx_threads=threads)

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Remove crash leftovers, keep large buffers out of the C heap so an unload gives them
        back, start the idle-unload thread (the engine loads on the first job)."""
        self.remove_partial_outputs()
        return_large_blocks()
        if self.holder.idle_seconds <= 0 or self._idle_thread is not None:
            return
        interval = min(30.0, max(0.05, self.holder.idle_seconds / 4))

        def watch() -> None:
            while not self._stop.wait(interval):
                try:
                    self.holder.unload_if_idle()
                except Exception:
                    logger.exception("idle unload failed")

        self._idle_thread = threading.Thread(target=watch, name="cosyedge-idle-unload", daemon=True)
        self._idle_thread.start()

    def remove_partial_outputs(self) -> int:
        """Delete ``.tmp-*`` files in outputs/: half-written WAVs of a process that was killed.

        Run at start, before any job of this process can be writing one; returns how many.
        """
        removed = 0
        try:
            leftovers = list(self.settings.outputs_path.glob(".tmp-*"))
        except OSError:
            return 0
        for path in leftovers:
            try:
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed += 1
            except OSError as exc:
                logger.warning("could not remove leftover %s: %s", path, exc)
        if removed:
            logger.warning("removed %d half-written file(s) left in %s by an earlier crash", removed,
                           self.settings.outputs_path)
        return removed

    def close(self) -> None:
        """Stop accepting work, cancel jobs, release the engine."""
        self._stop.set()
        self.queue.shutdown()
        if self._idle_thread is not None:
            self._idle_thread.join(2)
        self.holder.unload()
        self.recognizer.release()

    # --- what is available ----------------------------------------------------------------
    def presets(self) -> list[str]:
        """Preset names: the engine's once it has been loaded, the seed's list before that."""
        return list(self.holder.presets) if self.holder.presets is not None else list(SEED_PRESETS)

    def voices(self) -> dict[str, Any]:
        """Presets, what each is made of (``preset_details``, docs/web.md; known once the engine has
        loaded) and saved voices (``prompts/library/``; use a saved voice's ``id`` as ``voice_id``;
        ``consent_given``: unix time, null when not recorded)."""
        clone, instruct = self.abilities()
        saved = [{"id": v.id, "name": v.name, "duration": v.duration_s,
                  "consent_given": v.consent.given_at if v.consent is not None else None}
                 for v in self.library.list()]
        caps = self.holder.capabilities
        details = [{"name": d.name, "engine": self.holder.name, "model": self.holder.model_id,
                    "languages": list(d.made_of), "made_of": d.made_of, **({"note": d.note} if d.note else {})}
                   for d in (caps.preset_details if caps is not None else ())]
        return {"presets": self.presets(), "preset_details": details, "saved": saved,
                "presets_source": "engine" if self.holder.presets is not None else "default list; "
                "the engine has not been loaded yet",
                "native_clone": clone, "native_instruct": instruct,
                "languages": list(caps.languages) if caps is not None else None}

    def abilities(self) -> tuple[bool | None, bool | None]:
        """(native clone, native instruct): the loaded engine's, or before the first load what the
        manifest's engine is known to do; (None, None) for an unknown engine. Cheap (no library
        listing): the page's status timer asks every few seconds."""
        caps = self.holder.capabilities
        if caps is not None:
            return caps.native_clone, caps.native_instruct
        return NATIVE_ABILITIES.get(self.model_engine_name(), (None, None))

    def save_voice(self, name: str, prompt_audio: bytes | None, transcript: str | None,
                   overwrite: bool = False, *, consent: bool | str | None = None) -> VoiceInfo:
        """Condition a prompt and save it in the library as ``name`` (usable as ``voice_id``).
        ``consent``: what the user confirmed (:func:`cosyedge.voices.consent.require_consent`)."""
        record = require_consent(consent, "saving a voice")
        refuse_preset_name(name, self.presets())
        self.check_room("saving a voice")
        if not prompt_audio:
            raise AudioError(f"no prompt audio to save: record or upload one first ({PROMPT_ADVICE})",
                             code="prompt_missing")
        prompt = self._condition(prompt_audio)
        info = self.library.save(name, prompt, transcript, engine=self.model_engine_name(),
                                 model_id=self.holder.model_id or self.settings.model, consent=record,
                                 overwrite=overwrite)
        if not (transcript or "").strip():
            try:  # heard in the background: the voice is saved whether or not it can be heard now
                self.transcribe_voice(info.id)
            except BusyError as exc:
                logger.info("voice %s saved without a transcript; hearing it waits for its first clone "
                            "(%s)", info.id, exc.code)
        return info

    # --- prompt transcripts (cosyedge.voices.transcripts), as queued jobs ------------------------
    def submit_transcription(self, prompt_audio: bytes | None, language: str = "auto", owner: str | None = None,
                             *, consent: bool | str | None = None) -> Job:
        """Queue hearing an uploaded prompt (the page's transcribe button); the job's result is a
        :class:`~cosyedge.voices.transcripts.PromptTranscript` (its confidence decides a zero-shot clone)."""
        require_consent(consent, "transcribing prompt audio")
        self.check_room("a new job")
        if not prompt_audio:
            raise AudioError(f"no prompt audio to transcribe: record or upload one first ({PROMPT_ADVICE})",
                             code="prompt_missing")
        if language not in KNOWN_LANGUAGES:
            raise ParameterError(f"language {language!r} must be one of {', '.join(KNOWN_LANGUAGES)}",
                                 code="language_unknown", language=language, choices=KNOWN_LANGUAGES)
        prompt = self._condition(prompt_audio)
        return self.queue.submit(functools.partial(self._run_transcription, prompt=prompt, language=language),
                                 owner=owner)

    def transcribe_voice(self, voice_id: str, owner: str | None = None) -> Job:
        """Queue hearing a saved voice and storing the transcript in its record (source ``asr``,
        with the confidence); the job's result is the :class:`PromptTranscript`."""
        self.library.get(voice_id)  # NotFoundError naming the problem, before queueing

        def work(job: Job) -> PromptTranscript:
            prompt, _, _ = self.library.load(voice_id)
            heard = self._run_transcription(job, prompt, "auto")
            self._store_heard(voice_id, heard)
            return heard

        return self.queue.submit(work, owner=owner)

    def set_voice_transcript(self, voice_id: str, transcript: str) -> VoiceInfo:
        """A person's transcript for a saved voice (typed or corrected): always trusted."""
        return self.library.set_transcript(voice_id, transcript, source=SOURCE_USER)

    def voice_transcript(self, voice_id: str) -> PromptTranscript:
        """A saved voice's transcript as stored, with where it came from."""
        _, text, info = self.library.load(voice_id)
        return _saved_transcript(text, info) or PromptTranscript("", source=SOURCE_USER)

    def _run_transcription(self, job: Job, prompt: ConditionedPrompt, language: str) -> PromptTranscript:
        if job.is_cancelled():
            raise CancelledError("cancelled before transcription started")
        heard = self._hear(prompt, language, job.set_phase)
        if job.is_cancelled():
            raise CancelledError("cancelled")
        return heard

    def _hear(self, prompt: ConditionedPrompt, language: str,
              phase: Callable[[str], None] | None = None) -> PromptTranscript:
        """What the recognizer hears in a prompt, remembered by its audio (heard once per prompt)."""
        key = (hashlib.sha256(prompt.pcm_bytes()).hexdigest(), language)
        with self._heard_lock:
            known = self._heard.get(key)
        if known is not None:
            return known
        if phase is not None:
            phase(PHASE_TRANSCRIBING)
        # fewer threads while the thermal governor asks, from the recognizer's next load on (as for engines)
        self.recognizer.threads = self.engine_settings().threads
        heard = hear(self.recognizer.transcribe, prompt.pcm, prompt.sample_rate, language)
        with self._heard_lock:
            self._heard[key] = heard
            while len(self._heard) > HEARD_CACHE_ENTRIES:
                del self._heard[next(iter(self._heard))]
        return heard

    def _store_heard(self, voice_id: str, heard: PromptTranscript) -> None:
        """Keep a heard transcript in a saved voice's record, unless a person wrote one meanwhile."""
        try:
            current = self.voice_transcript(voice_id)
            if current.text and current.source == SOURCE_USER:
                return
            self.library.set_transcript(voice_id, heard.text, source=SOURCE_HEARD, confidence=heard.confidence)
        except (CosyedgeError, OSError) as exc:
            logger.warning("could not store the transcript heard in voice %s: %s", voice_id, exc)

    def model_engine_name(self) -> str:
        """The engine name, from the loaded engine or the model's manifest (cheap JSON read)."""
        if self.holder.name:
            return self.holder.name
        try:
            return read_identity(self.settings.model_path).engine
        except (CosyedgeError, OSError):
            return "unknown"

    def status(self, owner: str | None = None) -> ServiceStatus:
        state = self.holder.state
        if state == "not loaded" and not (self.settings.model_path / "manifest.json").is_file():
            state = "missing: run `python -m cosyedge setup-model`"
        position = own_phase = None
        if owner:
            for job in self.queue.jobs_of(owner):
                position = self.queue.position(job)
                own_phase = job.phase
                break
        return ServiceStatus(engine=self.model_engine_name(),
                             model=self.holder.model_id or self.settings.model,
                             model_state=state, queue=self.queue.stats(),
                             thermal=self.queue.thermal_snapshot(), position=position,
                             own_phase=own_phase)

    def update_status(self) -> UpdateStatus:
        """The running commit and whether an update is pending or was rolled back (/health)."""
        return self.deployment.status()

    def in_use_paths(self) -> set[Path]:
        """Files the janitor must not delete: WAVs being written and recent UI downloads."""
        now = time.monotonic()
        with self._in_use_lock:
            for path in [p for p, until in self._leases.items() if until <= now]:
                del self._leases[path]
            return set(self._writing) | set(self._leases)

    def lease(self, path: Path, seconds: float = DOWNLOAD_LEASE_S) -> None:
        """Protect a finished file from the janitor for a while (a client is downloading it)."""
        with self._in_use_lock:
            self._leases[Path(path).resolve()] = time.monotonic() + seconds

    # --- jobs and limits, for the adapters ------------------------------------------------
    def job(self, job_id: str) -> Job | None:
        """The job with this id, if the queue knows it; else None."""
        return self.queue.get(job_id)

    def active_jobs(self) -> list[Job]:
        """Running then waiting jobs, in order."""
        return self.queue.active_jobs()

    def position(self, job: Job) -> int | None:
        """A waiting job's 1-based place in the queue; None when it is not waiting."""
        return self.queue.position(job)

    @property
    def capacity(self) -> int:
        """How many jobs the queue holds at once, running and waiting."""
        return self.settings.concurrency + self.settings.queue_size

    @property
    def max_upload_mb(self) -> float:
        """The largest prompt or voice upload accepted, in MB."""
        return self.settings.max_upload_mb

    # --- models (cosyedge.catalog.models) --------------------------------------------------
    def models(self) -> dict[str, Any]:
        """The usable models under models/ (engine, capabilities, size, licence), which one is
        served, and the directories that hold no usable model with the reason."""
        usable, unusable = self.catalog.scan()
        return {"current": self.settings.model, "loaded": self.holder.loaded,
                "models": [{**info.as_dict(), "current": info.id == self.settings.model}
                           for info in usable],
                "unusable": [entry.as_dict() for entry in unusable]}

    def switch_model(self, model_id: str) -> ModelInfo:
        """Serve ``model_id`` from the next job on (it loads then, lazily, as at start).

        Refused with a ConflictError (``model_switch_busy``) while any job runs or waits, or a
        request is being checked: no job is drained or dropped. The engine in memory is released
        before the new model is chosen, so two models are never held at once."""
        info = self.catalog.get(model_id)  # NotFoundError / InputError naming the problem
        with self._submitting_lock:  # no request is queued while the model changes
            jobs = self.queue.stats()
            if self.active_jobs() or self._submitting:
                raise ConflictError(
                    f"cannot switch to {model_id!r} now: {jobs.running} job(s) running and "
                    f"{jobs.waiting} waiting on {self.settings.model!r}; switch when they have "
                    "finished (nothing was cancelled)", code="model_switch_busy", model=model_id,
                    current=self.settings.model, running=jobs.running, waiting=jobs.waiting)
            if model_id == self.settings.model:
                return info
            self.holder.unload()
            if self.holder.state != "not loaded":  # a load or release still under way
                raise ConflictError(f"cannot switch to {model_id!r} now: {self.settings.model!r} is "
                                    f"{self.holder.state}; try again in a moment",
                                    code="model_switch_loading", model=model_id,
                                    current=self.settings.model, state=self.holder.state)
            self.holder.forget()
            self.settings = dataclasses.replace(self.settings, model=model_id)
        logger.info("serving model %s (%s); it loads on the next job", model_id, info.engine)
        return info

    # --- saved voices and the page's history, for the studio tabs -------------------------
    def saved_voices(self) -> list[VoiceInfo]:
        """Every saved voice with its own record (name, length, models it is encoded for)."""
        return self.library.list()

    def voice_recording(self, voice_id: str) -> tuple[np.ndarray, int]:
        """A saved voice's recording as (float samples, sample rate), for playing it back."""
        prompt, _, _ = self.library.load(voice_id)
        return prompt.pcm, prompt.sample_rate

    def rename_voice(self, voice_id: str, new_name: str) -> VoiceInfo:
        return self.library.rename(voice_id, new_name, presets=self.presets())

    def delete_voice(self, voice_id: str) -> None:
        self.library.delete(voice_id)

    def export_voice(self, voice_id: str) -> bytes:
        """The voice as the .zip that ``library export`` writes."""
        return self.library.export(voice_id)

    def import_voice(self, data: bytes, name: str | None = None) -> VoiceInfo:
        """Import a voice .zip with the checks of ``library import`` (size limit and preset names
        included)."""
        limit = int(self.settings.max_upload_mb * 1024 * 1024)
        return self.library.import_zip(data, max_bytes=limit, name=name, presets=self.presets())

    def history(self, limit: int = 50) -> list[history.HistoryEntry]:
        """The page's last outputs still on disk, newest first (:mod:`cosyedge.service.history`)."""
        return history.entries(self.settings.outputs_path, limit)

    def retention(self) -> dict[str, float]:
        """How long outputs are kept: the janitor's limits (0 = no limit), for the page to say."""
        s = self.settings
        return {"max_age_hours": s.janitor_max_age_hours, "max_total_mb": s.janitor_max_total_mb,
                "max_files": s.janitor_max_files}

    @property
    def max_lesson_chars(self) -> int:
        """The longest lesson file accepted, in characters read aloud."""
        return self.settings.max_lesson_chars

    def check_room(self, what: str = "new work") -> None:
        """Refuse ``what`` (StorageFullError ``disk_low``) while the disk is nearly full."""
        self.disk.check(what)

    # --- long lessons (cosyedge.service.lessons) --------------------------------------------------
    def read_lesson(self, source: bytes | Path, filename: str | None = None) -> Lesson:
        """A lesson file (its bytes and name, or its path) checked and split; a coded error names
        what is wrong with it."""
        limits = (self.settings.max_lesson_chars, self.settings.max_text_chars)
        if isinstance(source, Path):
            return load_lesson(source, *limits)
        return read_lesson(source, filename or "", *limits)

    def submit_lesson(self, lesson: Lesson, request: TTSRequest, owner: str | None = None,
                      per_paragraph: bool = False) -> Job:
        """Queue a lesson read in ``request``'s voice and options (its text is ignored); the job's
        result is a :class:`~cosyedge.service.lessons.LessonResult` (a WAV, and with ``per_paragraph`` a
        zip of one WAV per paragraph, in outputs/)."""
        self.check_room("a new lesson")
        return self._prepare_and_queue(
            dataclasses.replace(request, text=lesson.paragraphs[0], keep_file=True), owner,
            lambda prepared: functools.partial(self._run_lesson, prepared=prepared, lesson=lesson,
                                               per_paragraph=per_paragraph),
            size=sum(len(paragraph) for paragraph in lesson.paragraphs))

    def _run_lesson(self, job: Job, prepared: PreparedRequest, lesson: Lesson,
                    per_paragraph: bool) -> LessonResult:
        started = time.monotonic()
        outputs = self.settings.outputs_path.resolve()
        outputs.mkdir(parents=True, exist_ok=True)
        wav = outputs / f"{job.id}.wav"
        archive = outputs / f"{job.id}.zip" if per_paragraph else None
        files = [p for p in (wav, archive) if p is not None]
        writing = files + [p.with_name(TEMP_PREFIX + p.name) for p in files]
        with self.holder.use(on_loading=lambda: job.set_phase(PHASE_LOADING)) as engine:
            if job.is_cancelled():
                raise CancelledError("cancelled before synthesis started")
            resolved = self.resolve(engine, prepared, job.is_cancelled, job.set_phase)
            rate, plan = engine.capabilities.sample_rate, resolved.plan
            effects = None if plan is None else (lambda piece: postprocess(piece, rate, plan))
            with self._in_use_lock:
                self._writing.update(writing)
            try:
                frames, sentences, skipped = synthesize_lesson(
                    engine, lesson, LessonPlan(resolved.choice.voice, resolved.options, effects), wav,
                    archive, first=resolved.analysis, phase=job.set_phase, report=job.report,
                    cancelled=job.is_cancelled, check_room=lambda: self.check_room("the rest of the lesson"))
                for path in files:
                    self.lease(path)
            finally:
                with self._in_use_lock:
                    self._writing.difference_update(writing)
            choice = resolved.choice
            return LessonResult(job_id=job.id, path=wav, zip_path=archive, paragraphs=len(lesson.paragraphs),
                                sentences=sentences, frames=frames, sample_rate=rate,
                                seconds=time.monotonic() - started, engine=engine.name,
                                model_id=engine.model_id, voice=choice.name, voice_match=choice.match,
                                instruct=instruct_report(plan), notes=resolved.notes, skipped=skipped)

    # --- submitting -----------------------------------------------------------------------
    def prepare(self, request: TTSRequest) -> PreparedRequest:
        """Check everything that can be checked without the engine (an InputError names what is
        wrong) and decode the prompt audio, once: the job's worker and the CLI take it from here."""
        check_text(request.text, self.settings.max_text_chars)
        if isinstance(request.speed, bool) or not isinstance(request.speed, (int, float)):
            raise ParameterError(f"speed must be a number, not {type(request.speed).__name__}",
                                 code="speed_not_number", type=type(request.speed).__name__)
        low, high = SPEED_RANGE
        if not low <= float(request.speed) <= high:
            raise ParameterError(f"speed {request.speed} is out of range ({low}-{high})",
                                 code="speed_out_of_range", speed=request.speed, low=low, high=high)
        steps = request.flow_steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or not 1 <= steps <= UPSTREAM_FLOW_STEPS):
            raise ParameterError(f"flow_steps must be a whole number 1-{UPSTREAM_FLOW_STEPS}, got {steps!r}",
                                 code="flow_steps_out_of_range", steps=steps)
        if request.language not in KNOWN_LANGUAGES:
            raise ParameterError(f"language {request.language!r} must be one of {', '.join(KNOWN_LANGUAGES)}",
                                 code="language_unknown", language=request.language, choices=KNOWN_LANGUAGES)
        if request.speaker is not None and self.holder.presets is not None:
            self._check_preset(request.speaker, self.holder.presets)
        if request.prompt_text is not None and len(request.prompt_text) > MAX_TRANSCRIPT_CHARS:
            # a native engine puts the transcript before every sentence of the text it reads
            raise TextError(f"prompt_text is {len(request.prompt_text)} characters; the limit is "
                            f"{MAX_TRANSCRIPT_CHARS} (the transcript of the prompt audio, 3-10 s of speech)",
                            code="prompt_text_too_long", length=len(request.prompt_text),
                            limit=MAX_TRANSCRIPT_CHARS)
        if request.voice_id is not None:
            self.library.get(request.voice_id)  # NotFoundError / NameError_ naming the problem
        prompt = None
        if request.prompt_audio is not None:
            require_consent(request.consent, "cloning from prompt audio")  # before the audio is read
            prompt = self._condition(request.prompt_audio)  # a bad prompt is refused before queueing
        if request.instruct is not None and len(request.instruct) > MAX_INSTRUCTION_CHARS:
            raise TextError(f"instruction is {len(request.instruct)} characters; the limit is "
                            f"{MAX_INSTRUCTION_CHARS}", code="instruction_too_long",
                            length=len(request.instruct), limit=MAX_INSTRUCTION_CHARS)
        return PreparedRequest(request, prompt)

    @staticmethod
    def _check_preset(name: str, presets: list[str]) -> str:
        if not presets:  # a clone-only model (CosyVoice-300M base): its engine names what is missing
            return name
        if name in ("", "default"):
            return presets[0]
        if name not in presets:
            raise NotFoundError(f"unknown voice {name!r}; choose one of {', '.join(presets)}",
                                code="preset_unknown", name=name, choices=tuple(presets))
        return name

    def submit(self, request: TTSRequest, owner: str | None = None,
               job_id: str | None = None, stream: bool = False) -> Job:
        """Prepare, then queue; raises InputError/NotFoundError at once and BusyError when full.

        ``stream``: the job gets an :class:`~cosyedge.service.streaming.AudioStream` (``job.stream``) that
        receives each joined piece as soon as it is made; the result and the file are as usual.
        """
        if job_id is not None and not JOB_ID_RE.match(job_id):
            raise NameError_("job id must be 1-64 letters, digits, '-' or '_'", code="job_id_invalid")
        self.check_room("a new job")
        return self._prepare_and_queue(request, owner, lambda prepared: functools.partial(
            self._run, prepared=prepared), job_id=job_id, stream=AudioStream() if stream else None)

    def _prepare_and_queue(self, request: TTSRequest, owner: str | None,
                           work: Callable[[PreparedRequest], Callable[[Job], Any]], **queue_args: Any) -> Job:
        """``prepare`` the request, then queue ``work(prepared)``; a cancel of ``owner`` that comes
        while the request is checked cancels the job (queued already cancelled). The job's size is
        its text's length unless ``queue_args`` says otherwise (a lesson's is the whole lesson)."""
        cancelled = threading.Event()
        if owner is not None:
            with self._submitting_lock:
                self._submitting.setdefault(owner, set()).add(cancelled)
        try:
            prepared = self.prepare(request)
        except BaseException:
            self._submitted(owner, cancelled)
            raise
        # Queued under the same lock as cancel_owner: a cancel counts this request either as
        # being checked (its flag: the job is then made already cancelled, so no worker can start
        # it in between) or as a queued job, never both.
        with self._submitting_lock:
            try:
                return self.queue.submit(work(prepared), owner=owner, cancelled=cancelled.is_set(),
                                         **{"size": len(prepared.request.text), **queue_args})
            finally:
                self._submitted(owner, cancelled)

    def _submitted(self, owner: str | None, flag: threading.Event) -> None:
        """Drop a submission's cancel flag (the lock is reentrant: called with or without it)."""
        if owner is None:
            return
        with self._submitting_lock:
            pending = self._submitting[owner]
            pending.discard(flag)
            if not pending:
                del self._submitting[owner]

    def cancel(self, job_id: str) -> bool:
        return self.queue.cancel(job_id)

    def cancel_owner(self, owner: str) -> int:
        """Cancel an owner's (a UI session's) jobs, queued or running, and the ones it is submitting
        right now (their check runs before they are queued); returns how many."""
        with self._submitting_lock:
            pending = list(self._submitting.get(owner, ()))
            for flag in pending:
                flag.set()
            return self.queue.cancel_owner(owner) + len(pending)

    # --- the work itself (a worker thread) ------------------------------------------------
    def _run(self, job: Job, prepared: PreparedRequest) -> TTSResult:
        started = time.monotonic()
        with self.holder.use(on_loading=lambda: job.set_phase(PHASE_LOADING)) as engine:
            if job.is_cancelled():
                raise CancelledError("cancelled before synthesis started")
            resolved = self.resolve(engine, prepared, job.is_cancelled, job.set_phase)

            def progress(done: int, total: int) -> None:
                job.report(done, total)
                job.set_phase(f"sentence {done}/{total}")

            choice, plan = resolved.choice, resolved.plan
            sample_rate = engine.capabilities.sample_rate
            engine_notes: list[str] = []
            if job.stream is None:
                out = synthesize(engine, resolved.analysis, choice.voice, resolved.options,
                                 self.settings.max_text_chars, progress=progress,
                                 cancelled=job.is_cancelled)
                audio = out.audio if plan is None else postprocess(out.audio, sample_rate, plan)
                sentences = len(out.sentences)
            else:
                job.stream.start(StreamInfo(sample_rate=sample_rate, engine=engine.name,
                                            model_id=engine.model_id,
                                            report={"voice": choice.name, "voice_match": choice.match,
                                                    "instruct": instruct_report(plan),
                                                    "notes": resolved.notes,
                                                    "skipped": resolved.skipped,
                                                    "transcript": resolved.transcript_report(),
                                                    "clone_mode": resolved.clone_mode}))
                audio, sentences, engine_notes = self._stream(job, job.stream, engine, resolved, progress)
            if job.is_cancelled():  # cancelled during the last sentence: do not answer as done
                raise CancelledError("cancelled")
            similarity = choice.similarity
            if choice.prompt is not None and audio.size:
                from cosyedge.listening.speaker import similarity as speaker_similarity

                job.set_phase(PHASE_SCORING)
                similarity = round(speaker_similarity(audio, sample_rate, choice.prompt.pcm,
                                                      choice.prompt.sample_rate), 4)
            result = TTSResult(job_id=job.id, audio=audio, sample_rate=sample_rate,
                               engine=engine.name, model_id=engine.model_id, voice=choice.name,
                               voice_match=choice.match, similarity=similarity,
                               instruct=instruct_report(plan),
                               sentences=sentences, seconds=time.monotonic() - started,
                               notes=[*resolved.notes, *engine_notes], skipped=resolved.skipped,
                               transcript=resolved.transcript_report(), clone_mode=resolved.clone_mode)
        if prepared.request.keep_file:
            result.path = self._write_output(job.id, result.audio, result.sample_rate)
            self._record_history(result, prepared.request.text)
        return result

    def _record_history(self, result: TTSResult, text: str) -> None:
        """The History tab's record of a page output (:mod:`cosyedge.service.history`); a record that cannot
        be written costs the list an entry, never the result."""
        assert result.path is not None
        try:
            history.record(result.path, text, voice=str(result.voice), engine=result.engine,
                           model=result.model_id, duration_s=result.duration)
        except OSError as exc:
            logger.warning("could not write the history record of %s: %s", result.path.name, exc)

    def resolve(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
                phase: Callable[[str], None] | None = None) -> ResolvedRequest:
        """Resolve a prepared request against the loaded engine, each step once: the voice (a
        prompt is encoded through the cache: seconds on a miss, stopped when ``cancelled()``), the
        instruction, the notes, and the engine's one pass over the text. ``phase`` hears the job's
        phases (:data:`PHASE_PREPARING_VOICE`, then :data:`PHASE_SYNTHESIZING`)."""
        request = prepared.request
        say = phase or (lambda _: None)
        if request.prompt_audio is not None or request.voice_id is not None:
            say(PHASE_PREPARING_VOICE)  # a new prompt's voice match takes seconds
        choice = self._resolve_voice(engine, prepared, cancelled, say)
        spoken = engine.capabilities.languages
        if request.language in MORE_LANGUAGES and request.language not in spoken:
            raise ParameterError(f"the {engine.name} engine does not speak language {request.language!r} "
                                 f"(it speaks {', '.join(spoken)})", code="language_not_supported",
                                 language=request.language, engine=engine.name, choices=spoken)
        options = SynthesisOptions(speed=float(request.speed), language=request.language,
                                   n_timesteps=request.flow_steps)
        plan, options, choice = self._plan_instruct(engine, request.instruct, options, choice)
        notes = ignored_inputs(request, engine) + flow_steps_notes(request, engine)
        clone_mode = None
        if choice.clone is not None and isinstance(choice.voice, VoicePrompt):
            clone_mode = "instruct" if options.instruct else choice.clone.mode
            if choice.clone.note is not None and clone_mode != "instruct":
                notes.append(choice.clone.note)
        say(PHASE_SYNTHESIZING)
        analysis = engine.analyze(request.text, options.language)
        if isinstance(choice.voice, VoicePrompt):
            notes.extend(reading_notes(choice.voice.meta, text_languages(analysis)))
            voice_notes = getattr(engine, "voice_notes", None)  # an engine's own account of its voice
            if callable(voice_notes):
                notes.extend(voice_notes(choice.voice))
        if request.language != "auto":
            notes.extend(analysis.notes)
        return ResolvedRequest(choice=choice, options=options, plan=plan, analysis=analysis,
                               notes=notes, skipped=list(analysis.skipped), clone_mode=clone_mode)

    def _stream(self, job: Job, stream: AudioStream, engine: Engine, resolved: ResolvedRequest,
                progress: Callable[[int, int], None]) -> tuple[np.ndarray, int, list[str]]:
        """Synthesize, putting each joined piece on the stream as soon as it is made; returns the
        audio, the sentence count and the engine's notes on its chunks (AudioChunk.notes).

        Pitch and gain effects (``resolved.plan``) run on each piece here rather than on the whole
        audio, so what is streamed is final; the result (and file) is exactly the streamed pieces
        joined.
        """
        pieces: list[np.ndarray] = []
        plan = resolved.plan
        sentences, notes = 0, []
        # stream=True: an engine that can (CosyVoice) yields hops within a sentence as they are made.
        options = dataclasses.replace(resolved.options, stream=True)
        for chunk, piece in stream_pieces(engine, resolved.analysis, resolved.choice.voice,
                                          options, self.settings.max_text_chars,
                                          progress=progress, cancelled=job.is_cancelled):
            if job.is_cancelled():  # cancelled while this chunk was made: stream nothing more
                raise CancelledError("cancelled")
            if plan is not None and piece.size:
                piece = postprocess(piece, engine.capabilities.sample_rate, plan)
            stream.put(piece)
            pieces.append(piece)
            sentences += not chunk.continues
            notes.extend(chunk.notes)
        audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        stream.share(audio)  # one copy of the audio, not two, while the job's result is kept
        return audio, sentences, notes

    def _write_output(self, job_id: str, audio: np.ndarray, sample_rate: int) -> Path:
        path = (self.settings.outputs_path / f"{job_id}.wav").resolve()
        with self._in_use_lock:
            self._writing.add(path)
        try:
            write_wav(path, audio, sample_rate)
            self.lease(path)
        finally:
            with self._in_use_lock:
                self._writing.discard(path)
        return path

    def _condition(self, data: bytes) -> ConditionedPrompt:
        return condition_prompt(data, max_bytes=int(self.settings.max_upload_mb * 1024 * 1024))

    def _resolve_voice(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
                       phase: Callable[[str], None] | None = None) -> VoiceChoice:
        """Pick the engine's voice: a preset, or a prompt (uploaded or saved) encoded through the cache.

        The uploaded prompt was conditioned by :meth:`prepare` (cosyedge.audio); a prompt is encoded
        once per (audio, transcript, engine, model) by the prompt cache: a native clone on
        CosyVoice (zero-shot with a trusted transcript, typed or heard; else cross-lingual:
        ``_clone_transcript``), the approximate voice match on Kokoro.
        """
        request = prepared.request
        if request.voice_id is None and prepared.prompt is None:
            preset = self._check_preset(request.speaker or "", list(engine.presets()))
            return VoiceChoice(preset, preset, Note("preset", code="voice_preset"))
        if request.voice_id is not None:
            prompt, text, info = self.library.load(request.voice_id)
            said = _saved_transcript(text, info)
            name = f"saved voice {info.name}"
        else:
            typed = (request.prompt_text or "").strip()
            said = PromptTranscript(typed, source=SOURCE_USER) if typed else None
            prompt = prepared.prompt
            name = "prompt audio"
        # an engine that cannot clone matches from the sound alone: the transcript would only
        # split the prompt cache (a new match for the same audio); ignored_inputs says so
        plan = transcript = None
        if engine.capabilities.native_clone:
            said, plan = self._clone_transcript(prompt, said, request, cancelled, phase)
            transcript = plan.transcript
        encoded = self.prompt_cache.get_or_encode(engine, prompt, transcript, cancelled=cancelled)
        if request.voice_id is not None:
            self._record_encoding(request.voice_id, engine)
        return VoiceChoice(encoded, name, describe_match(engine, encoded), prompt=prompt, transcript=said,
                           clone=plan)

    def _clone_transcript(self, prompt: ConditionedPrompt, said: PromptTranscript | None, request: TTSRequest,
                          cancelled: CancelFn | None, phase: Callable[[str], None] | None = None,
                          ) -> tuple[PromptTranscript | None, ClonePlan]:
        """A native clone's transcript and mode: the one typed or stored, else the one heard now
        (stored with a saved voice that had none), zero-shot only when it is trusted."""
        if said is not None and said.text:
            return said, clone_plan(said)
        if cancelled is not None and cancelled():
            raise CancelledError("cancelled before the prompt was transcribed")
        try:
            heard = self._hear(prompt, request.language, phase)
        except ModelMissingError as exc:
            logger.warning("prompt not transcribed: %s", exc)
            return None, clone_plan(None, unavailable="the speech recognizer is not installed")
        if phase is not None:
            phase(PHASE_PREPARING_VOICE)
        if request.voice_id is not None and heard.text:
            self._store_heard(request.voice_id, heard)
        return heard, clone_plan(heard)

    def _record_encoding(self, voice_id: str, engine: Engine) -> None:
        """Note in the saved voice's own record that it is encoded for this model; a voice renamed
        or deleted meanwhile just is not noted (the job goes on with the audio it read)."""
        try:
            self.library.record_encoding(voice_id, engine.name, engine.model_id)
        except (CosyedgeError, OSError) as exc:
            logger.warning("could not note that voice %s is encoded for %s: %s", voice_id,
                           engine.model_id, exc)

    @staticmethod
    def _plan_instruct(engine: Engine, instruct: str | None, options: SynthesisOptions,
                       choice: VoiceChoice) -> tuple[InstructPlan | None, SynthesisOptions, VoiceChoice]:
        """Read the instruction into a plan (:mod:`cosyedge.instruct.plan`) and fold it into the request.

        Engines with native instruct get the formatted instruction in ``options.instruct`` and nothing
        else; others get explicit controls: speed here, pitch and volume in ``postprocess`` after
        synthesis, and a preset when the instruction asks for a kind of voice.
        """
        if not instruct or not instruct.strip():
            return None, options, choice
        plan = plan_for_engine(instruct, engine)
        applied = apply_plan(plan, options, choice.voice, speed_range=engine.capabilities.speed_range)
        if applied.voice is not choice.voice:
            match = Note(f"preset {applied.voice}, asked for by the instruction (instead of {choice.name})",
                         code="voice_instruct_preset", voice=str(applied.voice), instead_of=choice.name)
            choice = dataclasses.replace(choice, voice=applied.voice, name=str(applied.voice), match=match,
                                         similarity=None,
                                         prompt=None)  # no similarity to a voice that was not used
        return applied.plan, applied.options, choice


#: Upstream CosyVoice's flow-matching steps (``flow.inference`` hard-codes 10).
UPSTREAM_FLOW_STEPS = 10


def flow_steps_notes(request: TTSRequest, engine: Engine) -> list[str]:
    """What the answer says about the flow steps: the count a CosyVoice engine used (fewer than
    upstream's 10 labelled as not validated), or that the engine has none."""
    steps = request.flow_steps
    if not str(engine.name).startswith("cosyvoice"):
        return [] if steps is None else [Note(f"flow_steps ignored: {engine.name} has no flow-matching decoder",
                                              code="flow_steps_ignored", engine=engine.name)]
    used = UPSTREAM_FLOW_STEPS if steps is None else int(steps)
    if used == UPSTREAM_FLOW_STEPS:
        return [Note(f"flow steps: {used} (standard, as upstream)", code="flow_steps_standard", steps=used)]
    return [Note(f"flow steps: {used} (fast: fewer than upstream's {UPSTREAM_FLOW_STEPS}, not validated "
                 "on real weights)", code="flow_steps_fast", steps=used)]


def ignored_inputs(request: TTSRequest, engine: Engine) -> list[str]:
    """The request's fields that had no effect, each with the reason (no error: the job still runs).

    The voice comes from ``voice_id``, else ``prompt_audio``, else ``speaker``; ``prompt_text`` is
    the prompt's transcript, used only by an engine that clones natively."""
    notes: list[str] = []
    source = None
    if request.voice_id is not None:
        source = f"the saved voice {request.voice_id!r} (voice_id)"
        if request.prompt_audio is not None:
            notes.append(Note(f"prompt_audio ignored: {source} was used instead",
                              code="prompt_audio_ignored", voice_id=request.voice_id))
    elif request.prompt_audio is not None:
        source = "prompt_audio"
    if request.speaker not in (None, "", "default") and source is not None:
        notes.append(Note(f"speaker {request.speaker!r} ignored: the voice comes from {source}",
                          code="speaker_ignored_saved_voice" if request.voice_id is not None
                          else "speaker_ignored_prompt_audio",
                          speaker=request.speaker, voice_id=request.voice_id))
    if request.prompt_text and request.prompt_text.strip():
        if request.voice_id is not None:
            notes.append(Note("prompt_text ignored: the saved voice keeps its own transcript",
                              code="prompt_text_ignored_saved_voice"))
        elif request.prompt_audio is None:
            notes.append(Note("prompt_text ignored: it is the transcript of prompt_audio, and no "
                              "prompt_audio was sent", code="prompt_text_ignored_no_prompt"))
        elif not engine.capabilities.native_clone:
            notes.append(Note(f"prompt_text ignored: the {engine.name} engine cannot clone; it matches "
                              "the voice from the sound of prompt_audio alone, without its transcript",
                              code="prompt_text_ignored_no_clone", engine=engine.name))
    return notes


def write_wav(path: Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write a result's WAV atomically (:func:`cosyedge.audio.write_wav_atomic`); a full disk or
    quota is a StorageFullError saying how much room there is and how much the result needs (the
    one mapping, for the service's outputs and the CLI's ``-o``). Other OSErrors are raised as they
    are, for the caller to word."""
    try:
        return write_wav_atomic(path, audio, sample_rate)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        free = shutil.disk_usage(path.parent).free / 1e6
        raise StorageFullError(f"the disk holding {path.parent} is full ({free:.1f} MB free, "
                               f"this result needs {len(audio) * 2 / 1e6:.1f} MB): old outputs "
                               "can be deleted to make room", code="disk_full", folder=str(path.parent),
                               free_mb=free, needed_mb=len(audio) * 2 / 1e6) from exc


def instruct_report(plan: InstructPlan | None) -> dict[str, Any]:
    """The instruction part of a result: applied, not supported, controls and a summary line."""
    if plan is None:
        return {"applied": [], "not_supported": [], "controls": {}, "message": NO_INSTRUCTION}
    return plan.to_dict()


def describe_match(engine: Engine, encoded: VoicePrompt) -> Note:
    """What the prompt became, in words for the UI panel and REST: "native clone" on an engine that
    clones; on Kokoro "approximate voice match" with the probe similarity before and after."""
    if engine.capabilities.native_clone:
        return Note("native clone", code="voice_native_clone")
    meta = encoded.meta
    method = meta.get("method", "approximate voice match")
    if "similarity_before" in meta and "similarity_after" in meta:
        before, after = meta["similarity_before"], meta["similarity_after"]
        nearest = meta.get("nearest_preset", "?")
        return Note(f"{method}: similarity {before:.2f} (nearest preset {nearest}) -> {after:.2f}",
                    code="voice_match_approx", method=method, before=before, nearest=nearest, after=after)
    return Note(str(method), code="voice_match_method", method=method)


def _saved_transcript(text: str, info: VoiceInfo) -> PromptTranscript | None:
    """A saved voice's stored transcript with its source (one saved before sources were recorded
    was typed); None when it has none."""
    text = (text or "").strip()
    if not text:
        return None
    if info.transcript_source == SOURCE_HEARD:
        return PromptTranscript(text, source=SOURCE_HEARD, confidence=info.transcript_confidence)
    return PromptTranscript(text, source=SOURCE_USER)
