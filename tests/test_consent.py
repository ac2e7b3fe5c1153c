"""The one consent check (cosyedge.voices.consent) and its record."""

from __future__ import annotations

import pytest

from cosyedge.voices.consent import ConsentRecord, describe, require_consent
from cosyedge.errors import ParameterError


@pytest.mark.parametrize("confirmed", [None, False, "", "   ", 1, "true\x00", "x" * 129])
def test_anything_but_true_or_a_reference_is_refused(confirmed):
    with pytest.raises(ParameterError) as info:
        require_consent(confirmed, "saving a voice")
    assert info.value.code in ("consent_required", "consent_reference_invalid")
    assert info.value.params["action"] == "saving a voice"


def test_true_and_a_reference_are_recorded_with_the_time():
    assert require_consent(True, "x", clock=lambda: 42.0) == ConsentRecord(given_at=42.0)
    record = require_consent(" cons_123 ", "x", clock=lambda: 7.0)
    assert record == ConsentRecord(given_at=7.0, reference="cons_123")
    assert ConsentRecord.from_meta(record.to_meta()) == record


@pytest.mark.parametrize("meta", [None, {}, {"given_at": "yesterday"}, {"given_at": True},
                                  {"given_at": 1.0, "reference": 5}, "2026-01-01"])
def test_a_missing_or_unreadable_record_is_not_recorded(meta):
    assert ConsentRecord.from_meta(meta) is None
    assert describe(ConsentRecord.from_meta(meta)) == "consent not recorded"


def test_describe_says_when():
    assert describe(ConsentRecord(given_at=0.0)) == "consent given 1970-01-01 00:00 UTC"
