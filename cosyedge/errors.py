"""One exception tree for the whole project, mapped once to HTTP codes and once to UI errors.

::

    CosyedgeError                 base; never raised directly
    ├── InputError (400)          the request itself is wrong
    │   ├── TextError             empty, too long, nothing speakable
    │   ├── AudioError            prompt audio unusable (format, rate, length, level)
    │   ├── ParameterError        a number or option out of range / wrong type
    │   ├── ReadingError          a pronunciation entry or its reading that cannot be used
    │   ├── NameError_            a voice or file name that is not allowed
    │   └── ProtocolError         a Wyoming event the server cannot take (framing, fields, order)
    ├── NotFoundError (404)       unknown voice, job or model
    ├── ConflictError (409)       not now: e.g. switching models while jobs run or wait
    ├── PayloadTooLargeError (413)
    ├── BusyError (429)           queue full or the box is too hot; carries retry_after
    ├── CancelledError (499)      the job was cancelled by its client
    ├── StorageFullError (507)    no room left on the disk that holds outputs/ or prompts/
    ├── ModelMissingError (503)   model files absent or corrupt; message names the fixing command
    └── EngineError (500)         the engine failed on valid input (a bug or broken model)

Every error has a stable ``kind`` (``error.type`` in JSON bodies: which branch of the tree), a
stable ``code`` (``error.code``: which refusal exactly) with the ``params`` it was raised with, and
a message written for the person who will read it. The codes a type is raised with are listed on
the type (``codes``); an error raised without one has its type's ``kind`` as its code. Programs
decide by the code and its params, never by the message: the page's Chinese is a table keyed by
code, so a reworded message keeps its translation.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, ClassVar, Mapping


class CosyedgeError(Exception):
    """Base class; ``http_status`` and ``kind`` drive the REST and UI mappings, ``code`` and
    ``params`` say which refusal it is (``raise TextError(msg, code="text_empty")``)."""

    http_status = 500
    kind = "internal_error"
    #: The codes this type is raised with (a test checks every raise site against these).
    codes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str, *, code: str | None = None, **params: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.kind
        self.params: Mapping[str, Any] = MappingProxyType(params)


class InputError(CosyedgeError):
    http_status = 400
    kind = "invalid_input"
    codes = ("voice_file_not_zip", "voice_file_members", "voice_file_damaged",
             "voice_file_transcript_not_utf8", "voice_file_meta_not_json", "voice_file_meta_format",
             "voice_file_meta_field", "transcript_too_long", "transcript_nul",
             "model_folder_invalid", "model_file_corrupt", "model_not_usable",
             "convert_wrong_family", "convert_unknown_config", "mode_check_no_modes", "mode_check_needs_voice")


class TextError(InputError):
    kind = "invalid_text"
    codes = ("text_not_string", "text_empty", "text_too_long", "text_markup", "text_only_punctuation",
             "text_no_supported_script", "prompt_text_too_long", "instruction_too_long",
             # a lesson file (cosyedge.service.lessons)
             "lesson_file_type", "lesson_not_utf8", "lesson_not_text", "lesson_empty", "lesson_too_long",
             "lesson_paragraph_invalid")


class AudioError(InputError):
    kind = "invalid_audio"
    codes = ("prompt_missing", "prompt_not_base64", "prompt_empty_file", "wav_truncated", "wav_no_data",
             "audio_not_recognised", "audio_unreadable", "prompt_rate_too_low", "prompt_too_long",
             "prompt_no_samples", "prompt_invalid_samples", "prompt_silent", "prompt_too_short")


class ParameterError(InputError):
    kind = "invalid_parameter"
    codes = ("speed_not_number", "speed_out_of_range", "language_unknown", "job_id_in_use",
             "instruct_not_string", "instruct_too_long", "model_version_unknown", "response_format_unknown",
             "consent_required", "consent_reference_invalid", "model_not_loaded",
             "voice_type_unsupported", "flow_steps_out_of_range", "quality_unknown",
             "quality_lever_out_of_range", "voice_needs_recording",
             "language_not_supported", "mode_not_supported", "captions_format_unknown")


class ReadingError(InputError):
    kind = "invalid_reading"
    codes = ("reading_language_unknown", "reading_word_empty", "reading_word_too_long", "reading_word_script",
             "reading_empty", "reading_too_long", "reading_control_chars", "reading_punctuation",
             "reading_tone_missing", "reading_tone_out_of_range", "reading_pinyin_unknown",
             "reading_syllable_count", "reading_ipa_unknown", "reading_arpabet_unknown", "reading_kana_only",
             "reading_tsv_not_utf8", "reading_book_full")


class NameError_(InputError):  # noqa: N801 - trailing underscore avoids shadowing the builtin
    kind = "invalid_name"
    codes = ("job_id_invalid", "voice_name_not_text", "voice_name_empty", "voice_name_control_chars",
             "voice_name_slash", "voice_name_too_long", "voice_name_not_allowed", "voice_name_no_id",
             "voice_id_invalid", "voice_id_taken", "voice_name_taken", "voice_names_exhausted",
             "voice_name_preset")


class ProtocolError(InputError):
    """A client's Wyoming event that is malformed or out of order; the server answers it with an
    ``error`` event (no HTTP status is ever sent for it)."""

    kind = "invalid_event"
    codes = ("event_header_too_long", "event_header_invalid", "event_length_invalid", "event_too_large",
             "event_data_invalid", "event_truncated", "event_unknown", "event_field_invalid",
             "stream_not_started", "stream_already_started")


class NotFoundError(CosyedgeError):
    http_status = 404
    kind = "not_found"
    codes = ("preset_unknown", "saved_voice_unknown", "saved_voice_damaged", "job_unknown",
             "job_stream_unknown", "job_stream_released", "model_unknown", "lesson_unknown",
             "reading_entry_unknown")


class ConflictError(CosyedgeError):
    http_status = 409
    kind = "conflict"
    codes = ("model_switch_busy", "model_switch_loading", "model_exists", "mode_check_not_served",
             "mode_check_running", "voice_exists")


class PayloadTooLargeError(CosyedgeError):
    http_status = 413
    kind = "payload_too_large"
    codes = ("prompt_file_too_large", "voice_file_too_large", "voice_file_member_too_large",
             "request_body_over_limit", "request_body_too_large", "lesson_file_too_large",
             "reading_tsv_too_large")


class BusyError(CosyedgeError):
    http_status = 429
    kind = "busy"
    codes = ("queue_full", "too_hot", "cooling_down", "shutting_down")  # cooling_down: full while hot

    def __init__(self, message: str, retry_after: int = 5, *, code: str | None = None,
                 **params: Any) -> None:
        super().__init__(message, code=code, **params)
        self.retry_after = retry_after


class CancelledError(CosyedgeError):
    http_status = 499
    kind = "cancelled"
    codes = ("client_disconnected", "cancelled_on_shutdown")


class StorageFullError(CosyedgeError):
    http_status = 507
    kind = "storage_full"
    # disk_low: under the free-disk threshold (cosyedge.host.diskspace); voice_library_full: the
    # saved-voice library's own bound (settings voice_library_max_voices / _max_mb)
    codes = ("disk_full", "disk_low", "voice_library_full")


class ModelMissingError(CosyedgeError):
    http_status = 503
    kind = "model_missing"


class EngineError(CosyedgeError):
    http_status = 500
    kind = "engine_error"
    codes = ("job_failed",)


def error_codes() -> dict[str, type[CosyedgeError]]:
    """Every error code -> the type raised with it: each type's listed codes and its ``kind``."""
    codes: dict[str, type[CosyedgeError]] = {}
    pending: list[type[CosyedgeError]] = [CosyedgeError]
    while pending:
        cls = pending.pop(0)
        pending.extend(cls.__subclasses__())
        codes.setdefault(cls.kind, cls)
        codes.update(dict.fromkeys(cls.__dict__.get("codes", ()), cls))
    return codes
