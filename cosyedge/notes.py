"""Notes the service reports next to a result: each with a stable code, its params and its English.

A :class:`Note` is its English text (a ``str``, so REST bodies, headers, logs and the CLI carry it
exactly as they always have) that also knows its ``code`` and the ``params`` it was made from, so
the page can say it in its own words (:mod:`cosyedge.web.ui` keys its wording by code) and nothing
ever reads the text to learn what a note means. Every code is listed in :data:`NOTE_CODES`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

#: Every note code, by what reports it (a test checks each ``Note(..., code=...)`` against these).
NOTE_CODES = (
    # request fields that had no effect (service.ignored_inputs)
    "prompt_audio_ignored", "speaker_ignored_saved_voice", "speaker_ignored_prompt_audio",
    "prompt_text_ignored_saved_voice", "prompt_text_ignored_no_prompt", "prompt_text_ignored_no_clone",
    # a language setting the script overrode (text.langid.language_notes)
    "language_not_applied",
    # text not read aloud (text.langid.Unread)
    "tag_not_read", "emoji_not_read", "symbols_not_read", "script_not_read",
    # what the voice became (service; an engine's own label: kokoro.closest_voice.label)
    "voice_preset", "voice_native_clone", "voice_closest_builtin",
    # how the closest built-in voice was chosen, and a voice whose sound changed (closest_voice.notes)
    "closest_voice_outside_band", "closest_voice_no_pitch", "voice_sound_changed",
    "voice_instruct_preset",
    # what an instruction did: the summary line (instruct.InstructPlan.message)
    "instruct_none", "instruct_native", "instruct_nothing_understood", "instruct_nothing_supported",
    "instruct_partly_applied", "instruct_applied",
    # ... on a model of a family that follows instructions, when this model does not (engine.instruct_notes)
    "instruct_as_controls",
    # ... its applied lines
    "instruct_control", "instruct_voice_preset", "instruct_voice_kept", "instruct_voice_instead",
    "instruct_voice_not", "instruct_voice_approximated", "instruct_emotion_approximated",
    "instruct_emotion_not", "instruct_language", "instruct_style_negated", "instruct_speed_limited",
    "instruct_pitch_limited", "instruct_volume_limited", "instruct_speed_combined_limited",
    "instruct_native_passed", "instruct_native_reading",
    # ... and its not-supported lines
    "instruct_voice_timbre", "instruct_voice_missing", "instruct_emotion_unheard", "instruct_emotion_gap",
    "instruct_language_unsupported", "instruct_style_unsupported", "instruct_conflict",
    "instruct_not_understood",
    # what conditioning did to a prompt (audio.condition_prompt_array)
    "prompt_clipping", "prompt_silence_trimmed", "prompt_cut", "prompt_low_level",
    "prompt_channels_cancel",
    # a lesson's progress while it is read (cosyedge.service.lessons)
    "lesson_progress", "lesson_zipping", "lesson_paragraph_failed",
    # the CosyVoice flow steps and quality levers used (service.reports.flow_notes)
    "flow_steps_standard", "flow_steps_fast", "flow_steps_ignored", "quality_levers", "quality_ignored",
    # what the speed-mode check found of an answer's mode on this model (service.mode_notes)
    "quality_checked", "quality_not_checked",
    # a native clone's prompt transcript heard offline, or why it was not used (transcripts.clone_plan)
    "transcript_heard", "transcript_unsure", "transcript_not_heard", "transcript_unavailable",
    # a voice prepared step by step (service.voice_progress): the job's phase, then the answer's note
    "voice_preparing", "voice_prepared",
    # a streamed sentence finished whole: its flow cache would pass the budget (cosyvoice.engine)
    "stream_cache_limit",
    # the pronunciation dictionary and inline readings (lexicon.matching.ReadingReport)
    "reading_applied", "reading_other_language", "reading_not_supported", "reading_book_damaged",
)


class Note(str):
    """A note for people: the English text with its ``code`` and ``params``.

    ``Note("speed ×0.80 ('slowly')", code="instruct_control", control="speed ×0.80", phrase="slowly")``
    compares, prints and serializes as its text; the page renders ``code`` and ``params`` instead.
    """

    code: str
    params: Mapping[str, Any]

    def __new__(cls, text: str, *, code: str, **params: Any) -> Note:
        note = super().__new__(cls, text)
        note.code = code
        note.params = MappingProxyType(params)
        return note

    def __reduce__(self) -> tuple[Any, ...]:
        # str's own would rebuild a copy from the text alone, without the code
        return _restore, (str(self), self.code, dict(self.params))


def _restore(text: str, code: str, params: dict[str, Any]) -> Note:
    return Note(text, code=code, **params)


def code_of(text: str) -> str | None:
    """The code of a note; None for plain text (an older result, or text that is no note)."""
    return text.code if isinstance(text, Note) else None
