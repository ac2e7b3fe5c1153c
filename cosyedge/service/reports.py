"""The honest account of a request, in coded notes (:class:`cosyedge.notes.Note`): the request's
fields that had no effect (:func:`ignored_inputs`), the flow steps used (:func:`flow_steps_notes`), the
instruction applied or not (:func:`instruct_report`) and what a prompt became
(:func:`describe_match`). Plain functions of the request and the engine: the resolver and the
job's worker put them in the result."""

from __future__ import annotations

from typing import Any

from cosyedge.engines.base import Engine, VoicePrompt
from cosyedge.instruct.plan import NO_INSTRUCTION, InstructPlan
from cosyedge.notes import Note
from cosyedge.service.requests import UPSTREAM_FLOW_STEPS, TTSRequest


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
