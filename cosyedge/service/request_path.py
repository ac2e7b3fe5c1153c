"""One request from the adapter to what the engine runs, each step once, for the job's worker and
the CLI alike: :meth:`RequestPath.prepare` checks a request (everything that needs no engine, before
the queue) and decodes its prompt once into a :class:`PreparedRequest`; :meth:`RequestPath.resolve`
turns that, with the loaded engine, into a :class:`ResolvedRequest`: the voice (a preset, or a prompt
or saved voice encoded through the prompt cache: a native clone with its transcript typed, stored or
heard, or Kokoro's approximate match), the instruction (:mod:`cosyedge.instruct.plan`), the notes
(:mod:`cosyedge.service.reports`), and the engine's one pass over the text (``Engine.analyze``),
which synthesis reads and the report quotes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from cosyedge.audio import ConditionedPrompt
from cosyedge.config import Settings, SettingsError
from cosyedge.engines.base import MORE_LANGUAGES, CancelFn, Engine, StepFn, SynthesisOptions, VoicePrompt
from cosyedge.errors import CancelledError, CosyedgeError, ModelMissingError, NotFoundError, ParameterError, TextError
from cosyedge.instruct.plan import MAX_INSTRUCTION_CHARS, InstructPlan, apply_plan, plan_for_engine
from cosyedge.notes import Note, code_of
from cosyedge.engines.cosyvoice.common.quality import check_quality, levers_for
from cosyedge.service.mode_notes import answer_voice, check_note
from cosyedge.service.reports import describe_match, flow_notes, ignored_inputs
from cosyedge.service.requests import (PHASE_PREPARING_VOICE, PHASE_SYNTHESIZING, REQUEST_LANGUAGES, SPEED_RANGE,
                                       PreparedRequest, ResolvedRequest, TTSRequest,
                                       VoiceChoice)
from cosyedge.service.pronunciations import READING_NOTES, check_inline
from cosyedge.service.synthesis import check_text
from cosyedge.service.transcription import Transcriber, saved_transcript
from cosyedge.service.voice_progress import PreparationTimes, VoicePreparation
from cosyedge.voices.consent import require_consent
from cosyedge.voices.library import MAX_TRANSCRIPT_CHARS, PromptCache, VoiceLibrary
from cosyedge.voices.transcripts import SOURCE_USER, ClonePlan, PromptTranscript, clone_plan

logger = logging.getLogger(__name__)


class RequestPath:
    """Prepares and resolves requests against the service's voices.

    ``settings`` and ``presets`` are read at each call (the served model can change; ``presets`` is
    None until an engine has loaded); ``condition`` decodes an upload (the service's one prompt check).
    """

    def __init__(self, settings: Callable[[], Settings], presets: Callable[[], list[str] | None],
                 library: VoiceLibrary, prompt_cache: PromptCache, transcriber: Transcriber,
                 condition: Callable[[bytes], ConditionedPrompt]) -> None:
        self._settings = settings
        self._presets = presets
        self.library = library
        self.prompt_cache = prompt_cache
        self.transcriber = transcriber
        self._condition = condition
        self.preparation_times = PreparationTimes()  # how long voices took to prepare, per engine

    def prepare(self, request: TTSRequest) -> PreparedRequest:
        """Check everything that can be checked without the engine (an InputError names what is
        wrong) and decode the prompt audio, once: the job's worker and the CLI take it from here."""
        check_text(request.text, self._settings().max_text_chars)
        check_inline(request.text)  # a bad {word|reading} is refused before the queue, naming the word
        if isinstance(request.speed, bool) or not isinstance(request.speed, (int, float)):
            raise ParameterError(f"speed must be a number, not {type(request.speed).__name__}",
                                 code="speed_not_number", type=type(request.speed).__name__)
        low, high = SPEED_RANGE
        if not low <= float(request.speed) <= high:
            raise ParameterError(f"speed {request.speed} is out of range ({low}-{high})",
                                 code="speed_out_of_range", speed=request.speed, low=low, high=high)
        levers_for(request.quality, request.flow_steps)  # quality_unknown / flow_steps_out_of_range
        if request.language not in REQUEST_LANGUAGES:
            raise ParameterError(f"language {request.language!r} must be one of {', '.join(REQUEST_LANGUAGES)}",
                                 code="language_unknown", language=request.language, choices=REQUEST_LANGUAGES)
        presets = self._presets()
        if request.speaker is not None and presets is not None:
            check_preset(request.speaker, presets)
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

    def resolve(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
                phase: Callable[[str], None] | None = None) -> ResolvedRequest:
        """Resolve a prepared request against the loaded engine, each step once: the voice (a
        prompt is encoded through the cache: seconds on a miss, stopped when ``cancelled()``), the
        instruction, the notes, and the engine's one pass over the text. ``phase`` hears the job's
        phases (:data:`PHASE_PREPARING_VOICE`, then :data:`PHASE_SYNTHESIZING`)."""
        request = prepared.request
        say = phase or (lambda _: None)
        preparation = None
        if request.prompt_audio is not None or request.voice_id is not None:
            say(PHASE_PREPARING_VOICE)  # a new prompt's encoding: seconds on CosyVoice, said step by step
            steps = getattr(engine, "prompt_steps", None)
            preparation = VoicePreparation(say, self.preparation_times, engine.name,
                                           steps() if callable(steps) else 0)
        choice = self._voice(engine, prepared, cancelled, preparation.phase if preparation else say,
                             step=preparation.engine_step if preparation else None)
        prepared_note = preparation.finish() if preparation is not None else None
        spoken = engine.capabilities.languages
        if request.language in MORE_LANGUAGES and request.language not in spoken:
            raise ParameterError(f"the {engine.name} engine does not speak language {request.language!r} "
                                 f"(it speaks {', '.join(spoken)})", code="language_not_supported",
                                 language=request.language, engine=engine.name, choices=spoken)
        quality = request.quality if request.quality is not None else self._settings().quality
        options = SynthesisOptions(speed=float(request.speed), language=request.language,
                                   n_timesteps=request.flow_steps,
                                   quality=quality if quality in engine.capabilities.quality_modes else None)
        plan, options, choice = self._plan_instruct(engine, request.instruct, options, choice)
        notes = ignored_inputs(request, engine) + flow_notes(request, engine, quality)
        if prepared_note is not None:  # why the first audio came late (a streamed answer's header too)
            notes.append(prepared_note)
        instruct_notes = getattr(engine, "instruct_notes", None)  # why a model read it as controls
        if plan is not None and not plan.native and callable(instruct_notes):
            notes.extend(instruct_notes())
        if quality in engine.capabilities.quality_modes:
            checked = check_note(self._settings().model_path, engine.model_id, quality,
                                 answer_voice(request, choice.voice))
            notes.extend([checked] if checked is not None else [])
        clone_mode = None
        if choice.clone is not None and isinstance(choice.voice, VoicePrompt):
            clone_mode = "instruct" if options.instruct else choice.clone.mode
            if choice.clone.note is not None and clone_mode != "instruct":
                notes.append(choice.clone.note)
        say(PHASE_SYNTHESIZING)
        analysis = engine.analyze(request.text, options.language)
        if isinstance(choice.voice, VoicePrompt):
            voice_notes = getattr(engine, "voice_notes", None)  # an engine's own account of its voice
            if callable(voice_notes):
                notes.extend(voice_notes(choice.voice))
        # what the pronunciation dictionary did is every answer's; the language notes only where a
        # language was asked for (under auto the script decides, and nothing was overridden)
        notes.extend(note for note in analysis.notes
                     if request.language != "auto" or code_of(note) in READING_NOTES)
        return ResolvedRequest(choice=choice, options=options, plan=plan, analysis=analysis,
                               notes=notes, skipped=list(analysis.skipped), clone_mode=clone_mode)

    def _voice(self, engine: Engine, prepared: PreparedRequest, cancelled: CancelFn | None = None,
               phase: Callable[[str], None] | None = None, step: StepFn | None = None) -> VoiceChoice:
        """Pick the engine's voice: a preset, or a prompt (uploaded or saved) encoded through the cache.

        The uploaded prompt was conditioned by :meth:`prepare` (cosyedge.audio); a prompt is encoded
        once per (audio, transcript, engine, model) by the prompt cache: a native clone on
        CosyVoice (zero-shot with a trusted transcript, typed or heard; else cross-lingual:
        ``_clone_transcript``), the closest built-in voice on Kokoro (``_record_encoding`` tells a
        saved voice whose sound changed since it was last used).
        """
        request = prepared.request
        if request.voice_id is None and prepared.prompt is None:
            presets = list(engine.presets())
            if not presets and request.speaker in (None, "", "default"):
                raise ParameterError(
                    f"the model {engine.model_id} has no preset voices: it clones a voice from a recording of "
                    "3-10 s. Send one (prompt_audio; the page's 3s quick clone) or use a saved voice (voice_id; "
                    "on the command line: `python -m cosyedge library save NAME AUDIO --consent`, then "
                    "`speak --voice-id ID`)",
                    code="voice_needs_recording", model=engine.model_id)
            preset = check_preset(request.speaker or "", presets)
            return VoiceChoice(preset, preset, Note("preset", code="voice_preset"))
        if request.voice_id is not None:
            prompt, text, info = self.library.load(request.voice_id)
            said = saved_transcript(text, info)
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
        encoded = self.prompt_cache.get_or_encode(engine, prompt, transcript, cancelled=cancelled, step=step)
        if request.voice_id is not None:
            encoded = self._record_encoding(request.voice_id, engine, encoded)
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
            heard = self.transcriber.hear(prompt, request.language, phase)
        except ModelMissingError as exc:
            logger.warning("prompt not transcribed: %s", exc)
            return None, clone_plan(None, unavailable="the speech recognizer is not installed")
        if phase is not None:
            phase(PHASE_PREPARING_VOICE)
        if request.voice_id is not None and heard.text:
            self.transcriber.store_heard(request.voice_id, heard)
        return heard, clone_plan(heard)

    def encode_saved(self, engine: Engine, voice_id: str, prompt: ConditionedPrompt, transcript: str | None) -> None:
        """A voice just saved, encoded now through the prompt cache (the entry its first use reads)
        and recorded with it (:meth:`_record_encoding`)."""
        self._record_encoding(voice_id, engine, self.prompt_cache.get_or_encode(engine, prompt, transcript))

    def _record_encoding(self, voice_id: str, engine: Engine, encoded: VoicePrompt) -> VoicePrompt:
        """Note in the saved voice's own record that it is encoded for this model, and what it sounds
        like there (``engine.sounded``: the closest built-in voice); when that differs from what it
        sounded like before, ``encoded`` comes back marked ``changed_from`` (its answer says so, once).
        A voice renamed or deleted meanwhile just is not noted (the job goes on with the audio it read)."""
        sounded = getattr(engine, "sounded", None)
        sounds = sounded(encoded) if callable(sounded) else None
        try:
            before = self.library.record_encoding(voice_id, engine.name, engine.model_id, sounds)
        except (CosyedgeError, OSError) as exc:
            logger.warning("could not note that voice %s is encoded for %s: %s", voice_id,
                           engine.model_id, exc)
            return encoded
        if before is None or encoded.meta.get("changed_from"):
            return encoded
        return dataclasses.replace(encoded, meta={**encoded.meta, "changed_from": before})

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


def check_quality_setting(settings: Settings) -> Settings:
    """``settings`` when its ``quality`` names a mode; a SettingsError naming the variable and the
    modes otherwise (the server default applies to every request that names none)."""
    try:
        check_quality(settings.quality)
    except ParameterError as exc:
        raise SettingsError(f"quality: {exc.message} (set COSYEDGE_QUALITY or --quality)") from None
    return settings


def check_preset(name: str, presets: list[str]) -> str:
    """The preset ``name`` stands for among the engine's ``presets`` ("" or "default": the first);
    NotFoundError (``preset_unknown``) listing them when it is none of them."""
    if not presets:  # a clone-only model: the resolver or its engine says that it clones from a recording
        return name
    if name in ("", "default"):
        return presets[0]
    if name not in presets:
        raise NotFoundError(f"unknown voice {name!r}; choose one of {', '.join(presets)}",
                            code="preset_unknown", name=name, choices=tuple(presets))
    return name
