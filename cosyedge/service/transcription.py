"""Prompt transcripts heard offline, for the service (:mod:`cosyedge.voices.transcripts` has the rules).

:class:`Transcriber` owns what the app's one speech recognizer has heard: each prompt is heard once
(remembered by its audio), in the job of a native clone that came without a transcript
(:meth:`Transcriber.hear`) or as a queued job of its own (:meth:`Transcriber.submit`: the page's
Transcribe button; :meth:`Transcriber.transcribe_voice`: a saved voice, its record updated unless a
person wrote one meanwhile).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from typing import Callable

from cosyedge.audio import PROMPT_ADVICE, ConditionedPrompt
from cosyedge.errors import AudioError, CancelledError, CosyedgeError, ParameterError
from cosyedge.listening.asr import Recognizer
from cosyedge.service.jobs import Job, JobQueue
from cosyedge.service.requests import PHASE_TRANSCRIBING, REQUEST_LANGUAGES
from cosyedge.voices.consent import require_consent
from cosyedge.voices.library import VoiceInfo, VoiceLibrary
from cosyedge.voices.transcripts import SOURCE_HEARD, SOURCE_USER, PromptTranscript, hear

logger = logging.getLogger(__name__)

#: Heard transcripts kept in memory by prompt audio (a prompt sent again is not heard again).
HEARD_CACHE_ENTRIES = 32


class Transcriber:
    """Hears prompts through ``recognizer``, in jobs on ``queue``; saved voices' transcripts in ``library``.

    ``condition`` decodes an upload (the service's one prompt check), ``threads`` gives the threads
    for the recognizer's next load (fewer while the thermal governor asks), ``check_room`` refuses
    new work while the disk is nearly full.
    """

    def __init__(self, recognizer: Recognizer, library: VoiceLibrary, queue: JobQueue,
                 condition: Callable[[bytes], ConditionedPrompt], threads: Callable[[], int],
                 check_room: Callable[[str], None]) -> None:
        self.recognizer = recognizer
        self.library = library
        self.queue = queue
        self._condition = condition
        self._threads = threads
        self._check_room = check_room
        self._heard: dict[tuple[str, str], PromptTranscript] = {}
        self._heard_lock = threading.Lock()

    def submit(self, prompt_audio: bytes | None, language: str = "auto", owner: str | None = None,
               *, consent: bool | str | None = None) -> Job:
        """Queue hearing an uploaded prompt (the page's transcribe button); the job's result is a
        :class:`~cosyedge.voices.transcripts.PromptTranscript` (its confidence decides a zero-shot clone)."""
        require_consent(consent, "transcribing prompt audio")
        self._check_room("a new job")
        if not prompt_audio:
            raise AudioError(f"no prompt audio to transcribe: record or upload one first ({PROMPT_ADVICE})",
                             code="prompt_missing")
        if language not in REQUEST_LANGUAGES:
            raise ParameterError(f"language {language!r} must be one of {', '.join(REQUEST_LANGUAGES)}",
                                 code="language_unknown", language=language, choices=REQUEST_LANGUAGES)
        prompt = self._condition(prompt_audio)
        return self.queue.submit(functools.partial(self._run, prompt=prompt, language=language), owner=owner)

    def transcribe_voice(self, voice_id: str, owner: str | None = None) -> Job:
        """Queue hearing a saved voice and storing the transcript in its record (source ``asr``,
        with the confidence); the job's result is the :class:`PromptTranscript`."""
        self.library.get(voice_id)  # NotFoundError naming the problem, before queueing

        def work(job: Job) -> PromptTranscript:
            prompt, _, _ = self.library.load(voice_id)
            heard = self._run(job, prompt, "auto")
            self.store_heard(voice_id, heard)
            return heard

        return self.queue.submit(work, owner=owner)

    def set_voice_transcript(self, voice_id: str, transcript: str) -> VoiceInfo:
        """A person's transcript for a saved voice (typed or corrected): always trusted."""
        return self.library.set_transcript(voice_id, transcript, source=SOURCE_USER)

    def voice_transcript(self, voice_id: str) -> PromptTranscript:
        """A saved voice's transcript as stored, with where it came from."""
        _, text, info = self.library.load(voice_id)
        return saved_transcript(text, info) or PromptTranscript("", source=SOURCE_USER)

    def _run(self, job: Job, prompt: ConditionedPrompt, language: str) -> PromptTranscript:
        if job.is_cancelled():
            raise CancelledError("cancelled before transcription started")
        heard = self.hear(prompt, language, job.set_phase)
        if job.is_cancelled():
            raise CancelledError("cancelled")
        return heard

    def hear(self, prompt: ConditionedPrompt, language: str,
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
        self.recognizer.threads = self._threads()
        heard = hear(self.recognizer.transcribe, prompt.pcm, prompt.sample_rate, language)
        with self._heard_lock:
            self._heard[key] = heard
            while len(self._heard) > HEARD_CACHE_ENTRIES:
                del self._heard[next(iter(self._heard))]
        return heard

    def store_heard(self, voice_id: str, heard: PromptTranscript) -> None:
        """Keep a heard transcript in a saved voice's record, unless a person wrote one meanwhile."""
        try:
            current = self.voice_transcript(voice_id)
            if current.text and current.source == SOURCE_USER:
                return
            self.library.set_transcript(voice_id, heard.text, source=SOURCE_HEARD, confidence=heard.confidence)
        except (CosyedgeError, OSError) as exc:
            logger.warning("could not store the transcript heard in voice %s: %s", voice_id, exc)


def saved_transcript(text: str, info: VoiceInfo) -> PromptTranscript | None:
    """A saved voice's stored transcript with its source (one saved before sources were recorded
    was typed); None when it has none."""
    text = (text or "").strip()
    if not text:
        return None
    if info.transcript_source == SOURCE_HEARD:
        return PromptTranscript(text, source=SOURCE_HEARD, confidence=info.transcript_confidence)
    return PromptTranscript(text, source=SOURCE_USER)
