"""The one consent check: cloning someone's voice needs the user's word that the speaker agreed.

Every adapter (page, REST ``/tts``, OpenAI ``/v1/audio/voices``, CLI, Wyoming) passes what its
user confirmed to the service, and the service calls :func:`require_consent` before it decodes
prompt audio or saves a voice. What is accepted:

* ``True``: the user ticked the box / sent ``consent: true`` / passed ``--consent``;
* a non-empty string: a consent reference (what OpenAI's ``audio.voices.create(consent=...)``
  sends, a consent recording's id); kept with the voice as given.

Anything else (missing, ``False``, ``""``, a number) is refused with ``consent_required``. A saved
voice remembers when consent was given (:class:`ConsentRecord` in its ``meta.json``); voices saved
before consent was asked for have no record and keep working, shown as "consent not recorded".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from cosyedge.errors import ParameterError

#: The longest consent reference kept (an OpenAI consent id is a short token).
MAX_REFERENCE_CHARS = 128
#: The words every adapter shows when consent is missing (the page adds its Chinese by code).
CONSENT_QUESTION = "the speaker of the prompt audio agreed to have their voice cloned"
NOT_RECORDED = "consent not recorded"


@dataclass(frozen=True)
class ConsentRecord:
    """When the user confirmed the speaker's consent, and the reference they gave (if any)."""

    given_at: float  # unix time
    reference: str | None = None  # e.g. an OpenAI consent id; None for a plain "yes"

    def to_meta(self) -> dict[str, Any]:
        return {"given_at": self.given_at, "reference": self.reference}

    @classmethod
    def from_meta(cls, value: Any) -> "ConsentRecord | None":
        """The record kept in a voice's meta; None for a voice saved before consent was recorded
        (or a record that cannot be read: it is then not recorded, never invented)."""
        if not isinstance(value, dict):
            return None
        given_at, reference = value.get("given_at"), value.get("reference")
        if isinstance(given_at, bool) or not isinstance(given_at, (int, float)):
            return None
        if reference is not None and (not isinstance(reference, str)
                                      or len(reference) > MAX_REFERENCE_CHARS):
            return None
        return cls(given_at=float(given_at), reference=reference)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.given_at))
        return f"consent given {when}" + (f" (reference {self.reference})" if self.reference else "")


def describe(record: ConsentRecord | None) -> str:
    """One line for listings: when consent was given, or :data:`NOT_RECORDED`."""
    return record.describe() if record is not None else NOT_RECORDED


def require_consent(confirmed: Any, action: str, clock: Callable[[], float] = time.time) -> ConsentRecord:
    """The record of the user's confirmation; ParameterError ``consent_required`` without one.

    ``action`` says what needed it ("saving a voice", "cloning from prompt audio") for the message.
    """
    if confirmed is True:
        return ConsentRecord(given_at=clock())
    if isinstance(confirmed, str) and confirmed.strip():
        reference = confirmed.strip()
        if len(reference) > MAX_REFERENCE_CHARS or not reference.isprintable():
            raise ParameterError(f"the consent reference must be printable text of at most "
                                 f"{MAX_REFERENCE_CHARS} characters", code="consent_reference_invalid",
                                 action=action, limit=MAX_REFERENCE_CHARS)
        return ConsentRecord(given_at=clock(), reference=reference)
    raise ParameterError(f"{action} needs your confirmation that {CONSENT_QUESTION} (consent: true "
                         "in REST, --consent in the CLI, the consent box on the page)",
                         code="consent_required", action=action)
