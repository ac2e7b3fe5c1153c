"""One exception tree for the whole project, mapped once to HTTP codes and once to UI errors.

::

    CosyedgeError                 base; never raised directly
    ├── InputError (400)          the request itself is wrong
    │   ├── TextError             empty, too long, nothing speakable
    │   ├── AudioError            prompt audio unusable (format, rate, length, level)
    │   ├── ParameterError        a number or option out of range / wrong type
    │   └── NameError_            a voice or file name that is not allowed
    ├── NotFoundError (404)       unknown voice, job or model
    ├── PayloadTooLargeError (413)
    ├── BusyError (429)           queue full or the box is too hot; carries retry_after
    ├── CancelledError (499)      the job was cancelled by its client
    ├── StorageFullError (507)    no room left on the disk that holds outputs/ or prompts/
    ├── ModelMissingError (503)   model files absent or corrupt; message names the fixing command
    └── EngineError (500)         the engine failed on valid input (a bug or broken model)

Every error has a stable ``kind`` string (used as ``error.type`` in JSON bodies) and a message written
for the person who will read it.
"""

from __future__ import annotations


class CosyedgeError(Exception):
    """Base class; ``http_status`` and ``kind`` drive the REST and UI mappings."""

    http_status = 500
    kind = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(CosyedgeError):
    http_status = 400
    kind = "invalid_input"


class TextError(InputError):
    kind = "invalid_text"


class AudioError(InputError):
    kind = "invalid_audio"


class ParameterError(InputError):
    kind = "invalid_parameter"


class NameError_(InputError):  # noqa: N801 - trailing underscore avoids shadowing the builtin
    kind = "invalid_name"


class NotFoundError(CosyedgeError):
    http_status = 404
    kind = "not_found"


class PayloadTooLargeError(CosyedgeError):
    http_status = 413
    kind = "payload_too_large"


class BusyError(CosyedgeError):
    http_status = 429
    kind = "busy"

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CancelledError(CosyedgeError):
    http_status = 499
    kind = "cancelled"


class StorageFullError(CosyedgeError):
    http_status = 507
    kind = "storage_full"


class ModelMissingError(CosyedgeError):
    http_status = 503
    kind = "model_missing"


class EngineError(CosyedgeError):
    http_status = 500
    kind = "engine_error"
