"""The work a queued job does, on a worker thread: :meth:`JobRunner.run` (one request: synthesized
whole or streamed piece by piece, scored against its prompt, its WAV written for the page) and
:meth:`JobRunner.run_lesson` (a lesson paragraph by paragraph, :mod:`cosyedge.service.lessons`). Each
resolves its prepared request through the service's one ``resolve`` and holds the engine for the
length of the job (:class:`~cosyedge.service.engine_holder.EngineHolder`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Protocol

import numpy as np

from cosyedge.config import Settings
from cosyedge.engines.base import CancelFn, Engine
from cosyedge.errors import CancelledError
from cosyedge.files import TEMP_PREFIX
from cosyedge.instruct.plan import postprocess
from cosyedge.service.engine_holder import EngineHolder
from cosyedge.service.captions import FORMATS, Captions, CaptionTrack
from cosyedge.service.jobs import Job
from cosyedge.service.lessons import Lesson, LessonPlan, LessonResult, synthesize_lesson
from cosyedge.service.outputs import OutputFiles
from cosyedge.service.reports import instruct_report
from cosyedge.service.requests import PHASE_LOADING, PHASE_SCORING, PreparedRequest, ResolvedRequest, TTSResult
from cosyedge.service.streaming import AudioStream, StreamInfo
from cosyedge.service.synthesis import stream as stream_pieces
from cosyedge.service.synthesis import synthesize


class Resolve(Protocol):
    """The service's ``resolve``: a prepared request against the loaded engine."""

    def __call__(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
                 phase: Callable[[str], None] | None = None) -> ResolvedRequest: ...


class JobRunner:
    """Runs prepared requests on the engine of ``holder``; pages' files go to ``outputs``.

    ``resolve`` is the service's own (the one request path, shared with the CLI), ``settings`` is read
    at each job (the served model can change), ``check_room`` refuses more writing on a nearly full disk.
    """

    def __init__(self, settings: Callable[[], Settings], holder: EngineHolder, resolve: Resolve,
                 outputs: OutputFiles, check_room: Callable[[str], None]) -> None:
        self._settings = settings
        self.holder = holder
        self._resolve = resolve
        self.outputs = outputs
        self._check_room = check_room

    def run(self, job: Job, prepared: PreparedRequest) -> TTSResult:
        """One request: resolved, synthesized (onto ``job.stream`` as it is made, when the job has
        one), scored against its prompt, and with ``keep_file`` written for the page."""
        started = time.monotonic()
        with self.holder.use(on_loading=lambda: job.set_phase(PHASE_LOADING)) as engine:
            if job.is_cancelled():
                raise CancelledError("cancelled before synthesis started")
            resolved = self._resolve(engine, prepared, job.is_cancelled, job.set_phase)

            def progress(done: int, total: int) -> None:
                job.report(done, total)
                job.set_phase(f"sentence {done}/{total}")

            choice, plan = resolved.choice, resolved.plan
            sample_rate = engine.capabilities.sample_rate
            engine_notes: list[str] = []
            if job.stream is None:
                out = synthesize(engine, resolved.analysis, choice.voice, resolved.options,
                                 self._settings().max_text_chars, progress=progress,
                                 cancelled=job.is_cancelled)
                audio = out.audio if plan is None else postprocess(out.audio, sample_rate, plan)
                sentences = len(out.sentences)
                captions = out.captions.scaled(audio.size / out.audio.size if out.audio.size else 1.0)
            else:
                job.stream.start(StreamInfo(sample_rate=sample_rate, engine=engine.name,
                                            model_id=engine.model_id,
                                            report={"voice": choice.name, "voice_match": choice.match,
                                                    "instruct": instruct_report(plan),
                                                    "notes": resolved.notes,
                                                    "skipped": resolved.skipped,
                                                    "transcript": resolved.transcript_report(),
                                                    "clone_mode": resolved.clone_mode}))
                audio, sentences, engine_notes, captions = self._stream(job, job.stream, engine, resolved,
                                                                        progress)
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
                               transcript=resolved.transcript_report(), clone_mode=resolved.clone_mode,
                               captions=captions)
        if prepared.request.keep_file:
            result.path = self.outputs.write(job.id, result.audio, result.sample_rate)
            result.caption_files = self.outputs.write_captions(job.id, captions)
            self.outputs.record_history(result, prepared.request.text)
        return result

    def _stream(self, job: Job, stream: AudioStream, engine: Engine, resolved: ResolvedRequest,
                progress: Callable[[int, int], None]) -> tuple[np.ndarray, int, list[str], Captions]:
        """Synthesize, putting each joined piece on the stream as soon as it is made; returns the
        audio, the sentence count, the engine's notes on its chunks (AudioChunk.notes) and the
        captions of the pieces as streamed.

        Pitch and gain effects (``resolved.plan``) run on each piece here rather than on the whole
        audio, so what is streamed is final; the result (and file) is exactly the streamed pieces
        joined.
        """
        pieces: list[np.ndarray] = []
        plan = resolved.plan
        sentences, notes = 0, []
        track = CaptionTrack(engine.capabilities.sample_rate)
        # stream=True: an engine that can (CosyVoice) yields hops within a sentence as they are made.
        options = dataclasses.replace(resolved.options, stream=True)
        for chunk, piece in stream_pieces(engine, resolved.analysis, resolved.choice.voice,
                                          options, self._settings().max_text_chars,
                                          progress=progress, cancelled=job.is_cancelled):
            if job.is_cancelled():  # cancelled while this chunk was made: stream nothing more
                raise CancelledError("cancelled")
            made = piece
            if plan is not None and piece.size:
                piece = postprocess(piece, engine.capabilities.sample_rate, plan)
            track.add(chunk, made, piece.size)
            stream.put(piece)
            pieces.append(piece)
            sentences += not chunk.continues
            notes.extend(chunk.notes)
        audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        stream.share(audio)  # one copy of the audio, not two, while the job's result is kept
        return audio, sentences, notes, track.captions()

    def run_lesson(self, job: Job, prepared: PreparedRequest, lesson: Lesson,
                   per_paragraph: bool) -> LessonResult:
        """A lesson in the prepared request's voice and options, appended paragraph by paragraph to
        ``outputs/<job-id>.wav`` with its captions (``.srt``, ``.vtt``; with ``per_paragraph`` the zip of
        one WAV and its captions per paragraph)."""
        started = time.monotonic()
        outputs = self._settings().outputs_path.resolve()
        outputs.mkdir(parents=True, exist_ok=True)
        wav = outputs / f"{job.id}.wav"
        archive = outputs / f"{job.id}.zip" if per_paragraph else None
        caption_files = {fmt: outputs / f"{job.id}.{fmt}" for fmt in FORMATS}
        files = [p for p in (wav, archive, *caption_files.values()) if p is not None]
        writing = files + [p.with_name(TEMP_PREFIX + p.name) for p in files]
        with self.holder.use(on_loading=lambda: job.set_phase(PHASE_LOADING)) as engine:
            if job.is_cancelled():
                raise CancelledError("cancelled before synthesis started")
            resolved = self._resolve(engine, prepared, job.is_cancelled, job.set_phase)
            rate, plan = engine.capabilities.sample_rate, resolved.plan
            effects = None if plan is None else (lambda piece: postprocess(piece, rate, plan))
            with self.outputs.writing(writing):
                run = synthesize_lesson(
                    engine, lesson, LessonPlan(resolved.choice.voice, resolved.options, effects), wav,
                    archive, first=resolved.analysis, phase=job.set_phase, report=job.report,
                    cancelled=job.is_cancelled, check_room=lambda: self._check_room("the rest of the lesson"),
                    caption_paths=caption_files.values())
                for path in files:
                    self.outputs.lease(path)
            choice = resolved.choice
            return LessonResult(job_id=job.id, path=wav, zip_path=archive, paragraphs=run.paragraphs,
                                sentences=run.sentences, frames=run.frames, sample_rate=rate,
                                seconds=time.monotonic() - started, engine=engine.name,
                                model_id=engine.model_id, voice=choice.name, voice_match=choice.match,
                                instruct=instruct_report(plan), notes=[*resolved.notes, *run.notes],
                                skipped=run.skipped, captions=run.captions, caption_files=caption_files,
                                lesson_paragraphs=len(lesson.paragraphs))
