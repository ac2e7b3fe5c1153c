"""What an answer in a speed mode other than ``exact`` says about that mode's check on the model:
``checked on this model on DATE with <voice>: similarity S, intelligibility +P points`` and the
verdict (``quality_checked``), or ``not checked`` (``quality_not_checked``: no record, the mode not
in it, or a record of an earlier conversion). The record is ``modes.json``
(:mod:`cosyedge.catalog.mode_verdicts`); an answer in another voice than the checked one says so.
"""

from __future__ import annotations

from pathlib import Path

from cosyedge.catalog.mode_verdicts import ModeRecord, read_record
from cosyedge.engines.base import VoicePrompt
from cosyedge.notes import Note
from cosyedge.service.requests import DEFAULT_QUALITY, TTSRequest


def answer_voice(request: TTSRequest, voice: str | VoicePrompt) -> tuple[str, str] | None:
    """(kind, id) of an answer's voice, as a check record names its own: a preset by name, a saved
    voice by id; None for a recording sent with the request."""
    if isinstance(voice, str):
        return "preset", voice
    if request.voice_id is not None:
        return "saved", request.voice_id
    return None


def check_note(model_dir: Path, model_id: str, quality: str, used: tuple[str, str] | None,
               record: ModeRecord | None = None) -> Note | None:
    """The note of an answer in ``quality`` on the model in ``model_dir`` with voice ``used``; None
    in exact mode (exact is the reference the modes are judged against)."""
    if quality == DEFAULT_QUALITY:
        return None
    record = record if record is not None else read_record(model_dir)
    entry = record.mode(quality) if record is not None and record.current else None
    if entry is None:
        why = ("its check was of an earlier conversion" if record is not None and not record.current
               else "run the Models tab's Check speed modes or `python -m cosyedge models check "
                    f"{model_id}`")
        return Note(f"quality {quality}: not checked on this model ({why})", code="quality_not_checked",
                    quality=quality, stale=record is not None and not record.current)
    figures, verdict, voice = entry["figures"], entry["verdict"], record.voice
    same = used is not None and (voice.get("kind"), voice.get("id")) == used
    words = f"preset {voice.get('name')}" if voice.get("kind") == "preset" else f"saved voice {voice.get('name')}"
    other = "" if same else " (not this answer's voice)"
    delta = figures.get("intelligibility_delta")
    heard = f"intelligibility {delta:+.1f} points" if delta is not None else "intelligibility not scored"
    outcome = "recommended" if verdict.get("recommended") else "not recommended"
    return Note(f"quality {quality}: checked on this model on {record.date} with {words}{other}: similarity "
                f"{figures['similarity']:.2f}, {heard}; {outcome} on this model", code="quality_checked",
                quality=quality, date=record.date, similarity=figures["similarity"], intelligibility_delta=delta,
                recommended=bool(verdict.get("recommended")), voice=voice.get("name"), same_voice=same)
