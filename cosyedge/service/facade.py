"""The facade that the UI, the REST API, Wyoming and the CLI share: :class:`Service`, one object per
process, built by app.py. It owns the parts of the service and wires them; each part lives in its
own module:

* the request path, one for the job's worker and the CLI: :meth:`Service.prepare` checks a request
  once and decodes its prompt once (before the queue, no engine needed) into a ``PreparedRequest``;
  :meth:`Service.resolve` turns that, with the loaded engine, into a ``ResolvedRequest``
  (:mod:`cosyedge.service.request_path`); the queued job runs it (:mod:`cosyedge.service.runner`)
  and says in its ``TTSResult`` exactly what the engine did (:mod:`cosyedge.service.requests`,
  :mod:`cosyedge.service.reports`);
* the one engine, loaded on first use and released when idle (:mod:`cosyedge.service.engine_holder`);
* the requests being checked before they are queued, so a cancel then still counts
  (:mod:`cosyedge.service.submissions`);
* outputs/: WAVs written atomically, files the janitor must leave (:mod:`cosyedge.service.outputs`);
* prompt transcripts heard offline (:mod:`cosyedge.service.transcription`), saved voices
  (:mod:`cosyedge.voices.library`), lessons (:mod:`cosyedge.service.lessons`), and the model served
  (:mod:`cosyedge.service.model_switch`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge.audio import PROMPT_ADVICE, ConditionedPrompt, condition_prompt
from cosyedge.catalog.abilities import INSTRUCT_NOTES, NATIVE_ABILITIES, QUALITY_ENGINES
from cosyedge.catalog.manifest import read_identity
from cosyedge.catalog.mode_verdicts import read_record
from cosyedge.catalog.models import ModelCatalog, ModelInfo
from cosyedge.config import Settings
from cosyedge.engines.base import LANGUAGES, CancelFn, Engine, closest_builtin
from cosyedge.errors import AudioError, BusyError, CosyedgeError, InputError, NameError_
from cosyedge.host.diskspace import DiskGuard, FreeProbe, free_bytes
from cosyedge.host.heap import return_large_blocks
from cosyedge.host.update_state import Deployment, UpdateStatus
from cosyedge.listening.asr import Recognizer
from cosyedge.service import history
from cosyedge.service.engine_holder import EngineFactory, EngineHolder, load_engine
from cosyedge.service.jobs import Job, JobQueue, ThermalSource
from cosyedge.service.lessons import Lesson, load_lesson, read_lesson
from cosyedge.service.mode_check import CheckVoice
from cosyedge.service.mode_check_runner import ModeCheckRunner
from cosyedge.service.model_switch import ModelSwitch
from cosyedge.service.outputs import DOWNLOAD_LEASE_S, OutputFiles
from cosyedge.service.pronunciations import Pronunciations, book_for
from cosyedge.service.request_path import RequestPath, check_quality_setting
from cosyedge.service.requests import (JOB_ID_RE, QUALITY_NAMES, SEED_PRESETS, PreparedRequest, ResolvedRequest,
                                       ServiceStatus, TTSRequest)
from cosyedge.service.runner import JobRunner
from cosyedge.service.streaming import AudioStream
from cosyedge.service.submissions import Submissions
from cosyedge.service.transcription import Transcriber
from cosyedge.voices.consent import require_consent
from cosyedge.voices.exchange import Imported, export_voice, import_voice
from cosyedge.voices.library import PromptCache, VoiceInfo, VoiceLibrary, refuse_preset_name
from cosyedge.voices.transcripts import PromptTranscript

logger = logging.getLogger(__name__)


class Service:
    """What the UI and the REST API call. One instance per process, built by app.py."""

    def __init__(self, settings: Settings, engine_factory: EngineFactory | None = None,
                 thermal: ThermalSource | None = None,
                 clock: Callable[[], float] = time.monotonic, disk_probe: FreeProbe = free_bytes,
                 recognizer: Recognizer | None = None, deployment: Deployment | None = None) -> None:
        self.settings = check_quality_setting(settings)
        # The commit this process started on and the OTA update's state, for /health.
        self.deployment = deployment or Deployment.of_this_code()
        # The app's one speech recognizer (cosyedge.listening.asr): loaded on first use, released when idle;
        # prompt transcripts listen through it.
        self.recognizer = recognizer or Recognizer.for_models(settings.models_path, settings.threads,
                                                              settings.asr_idle_seconds)
        # Refuses new jobs, saves and uploads while the disk is nearly full (disk_probe: a test seam).
        self.disk = DiskGuard((settings.outputs_path, settings.prompts_path),
                              int(settings.min_free_disk_mb * 1e6), probe=disk_probe)
        if engine_factory is None:
            def engine_factory() -> Engine:
                return load_engine(self.engine_settings())
        self.holder = EngineHolder(functools.partial(self._load_engine, engine_factory),
                                   settings.idle_unload_minutes * 60.0, clock)
        # Prompt cache and saved voices live under prompts/ (never swept by the output janitor).
        self.prompt_cache = PromptCache(settings.prompts_path / "cache")
        self.library = VoiceLibrary(settings.prompts_path / "library", max_voices=settings.voice_library_max_voices,
                                    max_bytes=int(settings.voice_library_max_mb * 1e6))
        # The box's pronunciation dictionary (prompts/pronunciations.tsv): every engine reads it at each text.
        self.pronunciations = Pronunciations(book_for(settings), self.check_room)
        self.catalog = ModelCatalog(settings.models_path)
        self.queue = JobQueue(settings.concurrency, settings.queue_size, thermal)
        self.submissions = Submissions(self.queue)
        self.outputs = OutputFiles(settings.outputs_path)
        self.transcriber = Transcriber(self.recognizer, self.library, self.queue, self._condition,
                                       threads=lambda: self.engine_settings().threads, check_room=self.check_room)
        self._path = RequestPath(lambda: self.settings, lambda: self.holder.presets, self.library,
                                 self.prompt_cache, self.transcriber, self._condition)
        # The job's work resolves through Service.resolve itself (the one request path, also the CLI's).
        self._runner = JobRunner(lambda: self.settings, self.holder,
                                 lambda *args, **kwargs: self.resolve(*args, **kwargs), self.outputs,
                                 self.check_room)
        # The speed-mode check: low-priority work on the served model, yielding to every job.
        self.mode_checks = ModeCheckRunner(lambda: self.settings, self.holder, self.queue, self.submissions,
                                           self._check_voice, self._hear_line)
        self._models = ModelSwitch(self.catalog, self.holder, self.queue, self.submissions,
                                   lambda: self.settings, self._serve, before_unload=self.mode_checks.stop,
                                   verdicts=self._speed_modes)
        self._stop = threading.Event()
        self._idle_thread: threading.Thread | None = None

    def _load_engine(self, factory: EngineFactory) -> Engine:
        """The factory's engine, given the box's pronunciation dictionary when it reads one
        (``pronounce_with``, read at each text)."""
        engine = factory()
        pronounce_with = getattr(engine, "pronounce_with", None)
        if callable(pronounce_with):
            pronounce_with(self.pronunciations.lexicon)
        return engine

    def _serve(self, settings: Settings) -> None:
        """Settings naming another model (the model switch, :mod:`cosyedge.service.model_switch`)."""
        self.settings = settings

    def _condition(self, data: bytes) -> ConditionedPrompt:
        """The service's one check of an uploaded prompt (decoded, conditioned; size limit first)."""
        return condition_prompt(data, max_bytes=int(self.settings.max_upload_mb * 1024 * 1024))

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
        if self.settings.auto_mode_check:
            self.mode_checks.watch()
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
        return self.outputs.remove_partial()

    def close(self) -> None:
        """Stop accepting work, cancel jobs, release the engine."""
        self._stop.set()
        self.mode_checks.close()
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
                  "consent_given": v.consent.given_at if v.consent is not None else None,
                  "voice_match": self.saved_voice_label(v)}
                 for v in self.library.list()]
        caps = self.holder.capabilities
        details = [{"name": d.name, "engine": self.holder.name, "model": self.holder.model_id,
                    "languages": list(d.made_of), "made_of": d.made_of, **({"note": d.note} if d.note else {})}
                   for d in (caps.preset_details if caps is not None else ())]
        return {"presets": self.presets(), "preset_details": details, "saved": saved,
                "library": self.library.usage().as_dict(),
                "presets_source": "engine" if self.holder.presets is not None else "default list; "
                "the engine has not been loaded yet",
                "native_clone": clone, "native_instruct": instruct,
                "languages": list(caps.languages) if caps is not None else None}

    def saved_voice_label(self, info: VoiceInfo) -> str | None:
        """On an engine that cannot clone, what a saved voice is spoken as on the current model:
        "closest built-in voice / 最接近的内置音色" with the voice once a job has chosen it (its
        ``sounds`` record); None on an engine that clones (or one not known yet)."""
        if self.abilities()[0] is not False:
            return None
        model = f"{self.model_engine_name()}/{self.holder.model_id or self.settings.model}"
        return str(closest_builtin(dict(info.sounds).get(model)))

    def abilities(self) -> tuple[bool | None, bool | None]:
        """(native clone, native instruct): the loaded engine's, or before the first load what the
        manifest's engine is known to do; (None, None) for an unknown engine. Cheap (no library
        listing): the page's status timer asks every few seconds."""
        caps = self.holder.capabilities
        if caps is not None:
            return caps.native_clone, caps.native_instruct
        return NATIVE_ABILITIES.get(self.model_engine_name(), (None, None))

    def languages(self) -> tuple[str, ...]:
        """The languages a request may name on the engine served: the loaded engine's, or before the
        first load auto/zh/en/ja, which every engine reads."""
        caps = self.holder.capabilities
        return tuple(caps.languages) if caps is not None else LANGUAGES

    @property
    def default_quality(self) -> str:
        """The mode of requests that name none (``Settings.quality``, COSYEDGE_QUALITY)."""
        return self.settings.quality

    def quality_modes(self) -> tuple[str, ...]:
        """The ``quality`` modes of the engine served (a request may name any of
        :data:`~cosyedge.service.requests.QUALITY_NAMES`; an engine without modes ignores it): the
        loaded engine's, or before the first load those its engine name offers (catalog.abilities)."""
        caps = self.holder.capabilities
        if caps is not None:
            return tuple(caps.quality_modes)
        return QUALITY_NAMES if self.model_engine_name() in QUALITY_ENGINES else ()

    def instruct_note(self) -> str:
        """What the served engine's native instruct follows, in words for the page (by engine name,
        :data:`cosyedge.catalog.abilities.INSTRUCT_NOTES`; "" when there is nothing to add)."""
        return INSTRUCT_NOTES.get(self.model_engine_name(), "")

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

    # --- outputs/ (cosyedge.service.outputs) ----------------------------------------------
    def in_use_paths(self) -> set[Path]:
        """Files the janitor must not delete: WAVs being written and recent UI downloads."""
        return self.outputs.in_use_paths()

    def lease(self, path: Path, seconds: float = DOWNLOAD_LEASE_S) -> None:
        """Protect a finished file from the janitor for a while (a client is downloading it)."""
        self.outputs.lease(path, seconds)

    def history(self, limit: int = 50) -> list[history.HistoryEntry]:
        """The page's last outputs still on disk, newest first (:mod:`cosyedge.service.history`)."""
        return history.entries(self.settings.outputs_path, limit)

    def retention(self) -> dict[str, float]:
        """How long outputs are kept: the janitor's limits (0 = no limit), for the page to say."""
        s = self.settings
        return {"max_age_hours": s.janitor_max_age_hours, "max_total_mb": s.janitor_max_total_mb,
                "max_files": s.janitor_max_files}

    def check_room(self, what: str = "new work") -> None:
        """Refuse ``what`` (StorageFullError ``disk_low``) while the disk is nearly full."""
        self.disk.check(what)

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

    @property
    def max_lesson_chars(self) -> int:
        """The longest lesson file accepted, in characters read aloud."""
        return self.settings.max_lesson_chars

    # --- models (cosyedge.service.model_switch) -------------------------------------------
    def models(self) -> dict[str, Any]:
        """The usable models under models/ (engine, capabilities, size, licence), which one is
        served, and the directories that hold no usable model with the reason."""
        return self._models.models()

    def switch_model(self, model_id: str) -> ModelInfo:
        """Serve ``model_id`` from the next job on; a ConflictError while jobs run or wait
        (:meth:`cosyedge.service.model_switch.ModelSwitch.switch`)."""
        return self._models.switch(model_id)

    # --- the speed-mode check (cosyedge.service.mode_check, .mode_check_runner) ------------
    def check_modes(self, model_id: str | None = None, voice_id: str | None = None) -> dict[str, Any]:
        """Start the speed-mode check of ``model_id`` (None: the served model; another is refused)
        with a preset or saved voice (None: its first preset); its status. ConflictError when another
        runs or the model is not served; InputError when the model has no modes, or no preset and no
        voice was given."""
        return self.mode_checks.start(model_id or self.settings.model, voice_id).as_dict()

    def mode_check(self, model_id: str | None = None) -> dict[str, Any]:
        """The check of ``model_id`` (None: the served model): this process's run (``status``) and the
        stored record (``result``, null before the first; ``current`` False when the model changed)."""
        model_id = model_id or self.settings.model
        self.catalog.get(model_id)  # NotFoundError naming the models there are
        record = read_record(self.settings.models_path / model_id)
        return {"status": self.mode_checks.status(model_id).as_dict(),
                "result": record.data if record is not None else None,
                "current": record.current if record is not None else None}

    def cancel_mode_check(self, model_id: str | None = None) -> bool:
        """Cancel the running speed-mode check (its previous record stays); True when one ran."""
        return self.mode_checks.cancel(model_id)

    def mode_verdicts(self) -> dict[str, dict[str, Any]]:
        """What the speed-mode check found of each mode on the served model (its verdict, two
        figures, ``stale`` after a reconversion); {} before any check."""
        summary = self._speed_modes(self.settings.model)
        if summary is None:
            return {}
        return {name: {**mode, "stale": summary["stale"], "checked": summary["checked"]}
                for name, mode in summary["modes"].items()}

    def _speed_modes(self, model_id: str) -> dict[str, Any] | None:
        record = read_record(self.settings.models_path / model_id)
        return record.summary() if record is not None else None

    def _check_voice(self, engine: Engine, voice_id: str | None) -> tuple[Any, CheckVoice]:
        """The voice a check renders with: a preset by name (None: the model's first), else a saved
        voice encoded through the request path (prompt cache, its transcript)."""
        presets = list(engine.presets())
        if voice_id is None or voice_id in presets:
            if not presets:
                raise InputError(f"model {engine.model_id!r} has no preset speakers: pick a saved voice to "
                                 "check its speed modes with", code="mode_check_needs_voice", model=engine.model_id)
            name = voice_id or presets[0]
            return name, CheckVoice("preset", name, name)
        info = self.library.get(voice_id)  # NotFoundError saved_voice_unknown
        resolved = self.resolve(engine, self.prepare(TTSRequest(text="check", voice_id=voice_id)))
        return resolved.choice.voice, CheckVoice("saved", voice_id, info.name)

    def _hear_line(self, audio: np.ndarray, sample_rate: int, language: str) -> str:
        return self.recognizer.transcribe(audio, sample_rate, language).text

    # --- saved voices and their transcripts, for the studio tabs --------------------------
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
        if self.holder.loaded and self.abilities()[0] is False:
            # the closest built-in voice, chosen now (well under a second, no model call), so the
            # voice's first use reads the prompt cache like a preset: the same rule keys both
            with self.holder.use() as engine:
                self._path.encode_saved(engine, info.id, prompt, transcript)
        if not (transcript or "").strip():
            try:  # heard in the background: the voice is saved whether or not it can be heard now
                self.transcribe_voice(info.id)
            except BusyError as exc:
                logger.info("voice %s saved without a transcript; hearing it waits for its first clone "
                            "(%s)", info.id, exc.code)
        return info

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
        """The voice as the .zip that ``library export`` writes, with its encodings for the models
        on this box (:mod:`cosyedge.voices.exchange`)."""
        return export_voice(self.library, self.prompt_cache, voice_id, self.settings.models_path,
                            max_bytes=int(self.settings.max_upload_mb * 1024 * 1024))

    def import_voice(self, data: bytes, name: str | None = None, *, rename: bool = False,
                     overwrite: bool = False) -> Imported:
        """Import a voice .zip with the checks of ``library import`` (size limit and preset names
        included) under the id it had (an id already here: ``voice_exists`` unless ``rename``), its
        encodings reused where this box has their model."""
        self.check_room("importing a voice")
        return import_voice(self.library, self.prompt_cache, data, self.settings.models_path,
                            max_bytes=int(self.settings.max_upload_mb * 1024 * 1024), name=name, rename=rename,
                            overwrite=overwrite, presets=self.presets())

    def submit_transcription(self, prompt_audio: bytes | None, language: str = "auto", owner: str | None = None,
                             *, consent: bool | str | None = None) -> Job:
        """Queue hearing an uploaded prompt (the page's transcribe button); the job's result is a
        :class:`~cosyedge.voices.transcripts.PromptTranscript` (its confidence decides a zero-shot clone)."""
        return self.transcriber.submit(prompt_audio, language, owner, consent=consent)

    def transcribe_voice(self, voice_id: str, owner: str | None = None) -> Job:
        """Queue hearing a saved voice and storing the transcript in its record (source ``asr``,
        with the confidence); the job's result is the :class:`PromptTranscript`."""
        return self.transcriber.transcribe_voice(voice_id, owner)

    def set_voice_transcript(self, voice_id: str, transcript: str) -> VoiceInfo:
        """A person's transcript for a saved voice (typed or corrected): always trusted."""
        return self.transcriber.set_voice_transcript(voice_id, transcript)

    def voice_transcript(self, voice_id: str) -> PromptTranscript:
        """A saved voice's transcript as stored, with where it came from."""
        return self.transcriber.voice_transcript(voice_id)

    # --- the pronunciation dictionary (cosyedge.service.pronunciations) --------------------
    def pronunciation_entries(self) -> dict[str, Any]:
        """Every entry, the file's unreadable lines and where a damaged file was kept."""
        return self.pronunciations.listing()

    def add_pronunciation(self, language: object, word: object, reading: object) -> dict[str, Any]:
        """Add or replace an entry (a ReadingError names the word and what is wrong)."""
        return self.pronunciations.add(language, word, reading)

    def delete_pronunciation(self, language: object, word: object) -> dict[str, Any]:
        return self.pronunciations.delete(language, word)

    def import_pronunciations(self, data: bytes) -> dict[str, Any]:
        """Add or replace the entries of a TSV; its bad lines listed, its good ones kept."""
        return self.pronunciations.import_tsv(data)

    def export_pronunciations(self) -> str:
        return self.pronunciations.export_tsv()

    # --- long lessons (cosyedge.service.lessons) ------------------------------------------
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
        request = dataclasses.replace(request, text=lesson.paragraphs[0], keep_file=True)
        return self.submissions.queue_checked(
            lambda: self.prepare(request), owner,
            lambda prepared: functools.partial(self._runner.run_lesson, prepared=prepared, lesson=lesson,
                                               per_paragraph=per_paragraph),
            size=sum(len(paragraph) for paragraph in lesson.paragraphs))

    # --- the request path (cosyedge.service.request_path, .runner) -------------------------
    def prepare(self, request: TTSRequest) -> PreparedRequest:
        """Check everything that can be checked without the engine (an InputError names what is
        wrong) and decode the prompt audio, once: the job's worker and the CLI take it from here."""
        return self._path.prepare(request)

    def resolve(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
                phase: Callable[[str], None] | None = None) -> ResolvedRequest:
        """Resolve a prepared request against the loaded engine, each step once: the voice, the
        instruction, the notes, and the engine's one pass over the text
        (:meth:`cosyedge.service.request_path.RequestPath.resolve`)."""
        return self._path.resolve(engine, prepared, cancelled, phase)

    def submit(self, request: TTSRequest, owner: str | None = None,
               job_id: str | None = None, stream: bool = False) -> Job:
        """Prepare, then queue; raises InputError/NotFoundError at once and BusyError when full.

        ``stream``: the job gets an :class:`~cosyedge.service.streaming.AudioStream` (``job.stream``) that
        receives each joined piece as soon as it is made; the result and the file are as usual.
        """
        if job_id is not None and not JOB_ID_RE.match(job_id):
            raise NameError_("job id must be 1-64 letters, digits, '-' or '_'", code="job_id_invalid")
        self.check_room("a new job")
        return self.submissions.queue_checked(
            lambda: self.prepare(request), owner,
            lambda prepared: functools.partial(self._runner.run, prepared=prepared),
            job_id=job_id, stream=AudioStream() if stream else None)

    def cancel(self, job_id: str) -> bool:
        return self.queue.cancel(job_id)

    def cancel_owner(self, owner: str) -> int:
        """Cancel an owner's (a UI session's) jobs, queued or running, and the ones it is submitting
        right now (their check runs before they are queued); returns how many."""
        return self.submissions.cancel_owner(owner)
