"""A client's Wyoming events read strictly: every malformed event is a :class:`ProtocolError` with a code.

A Wyoming event is a JSON header line (``type``, optional ``data``, ``data_length``,
``payload_length``), then ``data_length`` bytes of JSON data merged into ``data``, then
``payload_length`` bytes of payload. The ``wyoming`` package's own reader returns None for some
malformed events (the connection then ends without a word) and lets others raise out of the
connection's task (a traceback in the log per event). This reader says what was wrong instead.

Two kinds of fault, told apart by code (:data:`BROKEN_FRAMING`):

* **broken framing**: a header that is not a UTF-8 JSON object with a string ``type``, a length that
  is not a whole number >= 0 or is over its limit, data that is not a UTF-8 JSON object, a
  connection that ends inside an event. Where the next event starts is no longer known, so the
  server answers and closes.
* **intact framing, bad content**: an event type this server does not take, a field of the wrong
  type, a stream event out of order. The next event is read as usual.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from wyoming.event import Event

from cosyedge.errors import ProtocolError

#: Bytes of JSON data one event may carry: a synthesize text at the service's 5000-character limit,
#: every character escaped, is about 30 KB.
MAX_DATA_BYTES = 1 << 20
#: Bytes of payload one event may carry; a TTS server takes no audio, so this only bounds what is
#: read and dropped.
MAX_PAYLOAD_BYTES = 1 << 20
#: Codes after which the connection is closed: the stream's framing can no longer be trusted.
BROKEN_FRAMING = frozenset({"event_header_too_long", "event_header_invalid", "event_length_invalid",
                            "event_too_large", "event_data_invalid", "event_truncated"})


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{key} must be a whole number >= 0, got {json.dumps(value)[:40]}",
                            code="event_length_invalid", field=key)
    if value > limit:
        raise ProtocolError(f"{key} is {value} bytes; this server takes at most {limit}",
                            code="event_too_large", field=key, length=value, limit=limit)
    return value


def _json_object(raw: bytes, what: str) -> tuple[dict[str, Any] | None, str]:
    """``raw`` as a JSON object, or None and what is wrong with it."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"the event {what} is not valid UTF-8 (byte {exc.start})"
    except ValueError as exc:  # json.JSONDecodeError, or a number too large to parse
        return None, f"the event {what} is not JSON ({str(exc)[:80]})"
    if not isinstance(value, dict):
        return None, f"the event {what} must be a JSON object, not {type(value).__name__}"
    return value, ""


async def _exactly(reader: asyncio.StreamReader, count: int, what: str) -> bytes:
    if count == 0:
        return b""
    try:
        return await reader.readexactly(count)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"the connection ended inside the event's {what} ({len(exc.partial)} of "
                            f"{count} bytes)", code="event_truncated", part=what) from None


async def read_client_event(reader: asyncio.StreamReader) -> Event | None:
    """The next event, or None when the client closed the connection between events.

    Raises :class:`ProtocolError`; its code is in :data:`BROKEN_FRAMING` when the connection cannot
    go on. The header line's limit is the reader's own (asyncio's 64 KiB by default)."""
    try:
        line = await reader.readline()
    except ValueError:  # asyncio's LimitOverrunError: no newline within the reader's limit
        raise ProtocolError("the event header has no line end within the server's limit",
                            code="event_header_too_long") from None
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise ProtocolError("the connection ended inside an event header", code="event_truncated",
                            part="header")
    header, problem = _json_object(line, "header")
    if header is None:
        raise ProtocolError(problem, code="event_header_invalid", part="header")
    kind = header.get("type")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError("the event header has no \"type\" string", code="event_header_invalid",
                            part="header")
    data = header.get("data")
    if data is None:
        data = {}
    elif not isinstance(data, dict):
        raise ProtocolError("the event header's \"data\" must be a JSON object",
                            code="event_header_invalid", part="header")
    data_length = _length(header, "data_length", MAX_DATA_BYTES)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    if data_length:
        more, problem = _json_object(await _exactly(reader, data_length, "data"), "data")
        if more is None:
            raise ProtocolError(problem, code="event_data_invalid", part="data")
        data = {**data, **more}
    payload = await _exactly(reader, payload_length, "payload") if payload_length else None
    return Event(type=kind, data=data, payload=payload)


def text_field(event: Event, required: bool = True) -> str:
    """``data.text`` of a synthesize or synthesize-chunk event, checked to be a string."""
    text = event.data.get("text")
    if text is None and not required:
        return ""
    if not isinstance(text, str):
        what = "missing" if text is None else f"{json.dumps(text)[:40]}, not a string"
        raise ProtocolError(f"{event.type}: \"text\" is {what}", code="event_field_invalid",
                            event=event.type, field="text")
    return text


def voice_name(event: Event) -> str | None:
    """``data.voice.name`` of a synthesize or synthesize-start event (None when not given)."""
    voice = event.data.get("voice")
    if voice is None:
        return None
    if not isinstance(voice, dict):
        raise ProtocolError(f"{event.type}: \"voice\" must be an object", code="event_field_invalid",
                            event=event.type, field="voice")
    name = voice.get("name")
    if name is not None and not isinstance(name, str):
        raise ProtocolError(f"{event.type}: \"voice.name\" must be a string", code="event_field_invalid",
                            event=event.type, field="voice.name")
    return name or None
