"""The honest account of a request, in coded notes (:class:`cosyedge.notes.Note`): the request's
fields that had no effect (:func:`ignored_inputs`), the flow steps and quality levers used
(:func:`flow_notes`), the instruction applied or not (:func:`instruct_report`) and what a prompt
became (:func:`describe_match`). Plain functions of the request and the engine: the resolver and the
job's worker put them in the result."""

from __future__ import annotations

from typing import Any, Mapping

from cosyedge.engines.base import Engine, VoicePrompt, closest_builtin
from cosyedge.engines.cosyvoice.common.quality import DEFAULT_QUALITY, LEVER_WORDS, Levers, levers_for
from cosyedge.instruct.plan import NO_INSTRUCTION, InstructPlan
from cosyedge.notes import Note
from cosyedge.service.requests import UPSTREAM_FLOW_STEPS, TTSRequest


def flow_notes(request: TTSRequest, engine: Engine, quality: str) -> list[str]:
    """What the answer says about the flow: the steps an engine with quality modes used (fewer than
    upstream's 10 labelled as not validated) and, in a mode other than exact, every lever the mode
    set (``quality_levers``; the levers the model has no use for named apart); on an engine without
    modes, that ``flow_steps`` / ``quality`` had no effect, when the request sent them (the server
    default says nothing there)."""
    if quality not in engine.capabilities.quality_modes:
        notes: list[str] = []
        if request.flow_steps is not None:
            notes.append(Note(f"flow_steps ignored: {engine.name} has no flow-matching decoder",
                              code="flow_steps_ignored", engine=engine.name))
        if request.quality is not None:
            notes.append(Note(f"quality ignored: the {engine.name} engine has no quality modes (they set "
                              "CosyVoice's flow-matching levers)", code="quality_ignored", engine=engine.name,
                              quality=request.quality))
        return notes
    levers = engine_levers(engine, quality, request.flow_steps)
    used = levers.steps
    if used == UPSTREAM_FLOW_STEPS:
        notes = [Note(f"flow steps: {used} (standard, as upstream)", code="flow_steps_standard", steps=used)]
    else:
        notes = [Note(f"flow steps: {used} (fast: fewer than upstream's {UPSTREAM_FLOW_STEPS}, not validated "
                      "on real weights)", code="flow_steps_fast", steps=used)]
    if quality != DEFAULT_QUALITY:
        notes.append(quality_note(quality, levers, getattr(engine, "inapplicable_levers", None) or {}))
    return notes


def engine_levers(engine: Engine, quality: str, flow_steps: int | None) -> Levers:
    """The levers ``engine`` applies for ``quality`` (its ``quality_levers``: what its model can do),
    else the mode's own."""
    own = getattr(engine, "quality_levers", None)
    return own(quality, flow_steps) if callable(own) else levers_for(quality, flow_steps)


def quality_note(quality: str, levers: Levers, not_applicable: Mapping[str, str] | None = None) -> Note:
    """The note of an answer in a mode other than exact: the mode and each lever it set, by name
    (``levers``) and value; the levers the model has no use for (``not_applicable``: name -> why, the
    engine's ``inapplicable_levers``) named apart with the reason (``not_applicable`` in the params)."""
    skipped = dict(not_applicable or {})
    streamed = [words for name, words in (("left_chunks", "left context"), ("first_hop_tokens", "first hop"))
                if getattr(levers, name) and name not in skipped]
    when = f" (the {' and '.join(streamed)}: streamed answers)" if streamed else ""
    apart = "".join(f"; {LEVER_WORDS[name]} does not apply: {why}" for name, why in skipped.items())
    return Note(f"quality {quality}: {levers.describe(leave_out=skipped)}{when}{apart}; not validated on real weights",
                code="quality_levers", quality=quality, levers=levers.changed(), flow_steps=levers.steps,
                cfg_steps=levers.guided_steps, left_chunks=levers.left_chunks,
                first_hop_tokens=levers.first_hop_tokens, not_applicable=tuple(skipped))


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
            notes.append(Note(f"prompt_text ignored: the {engine.name} engine cannot clone; it chooses "
                              "the closest built-in voice from the sound of prompt_audio alone",
                              code="prompt_text_ignored_no_clone", engine=engine.name))
    return notes


def instruct_report(plan: InstructPlan | None) -> dict[str, Any]:
    """The instruction part of a result: applied, not supported, controls and a summary line."""
    if plan is None:
        return {"applied": [], "not_supported": [], "controls": {}, "message": NO_INSTRUCTION}
    return plan.to_dict()


def describe_match(engine: Engine, encoded: VoicePrompt) -> Note:
    """What the prompt became, in words for the UI panel and REST: "native clone" on an engine that
    clones; else the engine's own label (``describe_voice``; on Kokoro "closest built-in voice /
    最接近的内置音色: <preset>"). No similarity figure: the answer's ``similarity`` is measured on
    the audio it returns."""
    if engine.capabilities.native_clone:
        return Note("native clone", code="voice_native_clone")
    label = getattr(engine, "describe_voice", None)
    return label(encoded) if callable(label) else closest_builtin(encoded.meta.get("preset_voice"))
