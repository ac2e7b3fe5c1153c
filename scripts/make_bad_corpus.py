"""Generate the bad-input corpus: uploads, text, JSON, names and parameters that must be refused.

    .venv/bin/python scripts/make_bad_corpus.py [OUT_DIR]     # default tests/data/bad/ (git-ignored)

Every case is made here from code (no hand-made binaries). ``cases()`` (HTTP) and
``wyoming_cases()`` (raw bytes for the Wyoming TCP server) are what the tests use; the command writes
each case's request body to ``OUT_DIR/<id>.body`` (upload cases also their raw file as
``OUT_DIR/files/<name>``), each Wyoming case's bytes to ``OUT_DIR/wyoming/<id>.bin``, and the lists
to ``OUT_DIR/cases.json`` and ``OUT_DIR/wyoming.json`` for inspection or replay.

A case says which route it hits, the body (raw bytes: some are not valid JSON on purpose), the HTTP
codes that count as a correct refusal, and ``needs`` when the refusal belongs to a feature that
lands on another branch (prompt conditioning); see docs/reliability.md.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import sys
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "bad"
#: Needs the prompt conditioning of cosyedge.audio (branch `voices`) to be refused.
CONDITIONING = "prompt-conditioning"


@dataclass
class Case:
    """One bad request and what a correct answer looks like."""

    id: str
    group: str  # upload, text, json, name, parameter
    method: str
    path: str
    make_body: Callable[[], bytes] = field(repr=False)
    expect: tuple[int, ...] = (400,)
    kind: str | None = None  # the error.type expected, when one is certain
    needs: str | None = None
    upload_name: str | None = None  # the file name an upload case would carry in the page
    content_type: str = "application/json"

    def body(self) -> bytes:
        return self.make_body()

    def describe(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "make_body"}
        d["body_bytes"] = len(self.body())
        return d


# --- audio files ----------------------------------------------------------------------------


def _wav(samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype=subtype)
    return buf.getvalue()


def voice_like(seconds: float, rate: int) -> np.ndarray:
    """A speech-shaped tone (vowel-like harmonics, syllable envelope); deterministic."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.5 * t) ** 2
    return (0.25 * tone * envelope).astype(np.float32)


def _with_nan(value: float) -> bytes:
    x = voice_like(4.0, 16000)
    x[1000:1100] = value
    return _wav(x, 16000, "FLOAT")


def _truncated_data() -> bytes:
    full = _wav(voice_like(4.0, 16000), 16000)
    return full[: 44 + 3200]  # header promises 4 s, 0.1 s present


def _huge_chunk_header() -> bytes:
    """RIFF/WAVE whose first chunk claims ~4 GB."""
    return b"RIFF" + struct.pack("<I", 0xFFFFFFF0) + b"WAVE" + b"fmt " + struct.pack("<I", 0xFFFFFF00) \
        + b"\x01\x00" * 8


def _big_metadata_chunk() -> bytes:
    """A valid WAV of 0.05 s behind a 1 MB LIST chunk of junk."""
    audio = _wav(voice_like(0.05, 16000), 16000)
    junk = b"LIST" + struct.pack("<I", 1024 * 1024) + b"INFO" + b"\x07" * (1024 * 1024 - 4)
    body = audio[12:]
    riff = b"RIFF" + struct.pack("<I", 4 + len(junk) + len(body)) + b"WAVE"
    return riff + junk + body


def _png() -> bytes:
    raw = b"\x00\xff\x00\x00"
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) \
        + chunk(b"IEND", b"")


def _zip() -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("voice.wav", b"not really")
    return buf.getvalue()


#: (id, file name as uploaded, bytes maker, expected codes, kind, needs)
UPLOADS: list[tuple[str, str, Callable[[], bytes], tuple[int, ...], str | None, str | None]] = [
    ("empty_file", "empty.wav", lambda: b"", (400,), "invalid_audio", None),
    ("header_only_zero_samples", "zero.wav", lambda: _wav(np.zeros(0, np.float32), 16000), (400,),
     "invalid_audio", None),
    ("truncated_header", "cut.wav", lambda: _wav(voice_like(1.0, 16000), 16000)[:20], (400,),
     "invalid_audio", None),
    ("truncated_data", "cut_data.wav", _truncated_data, (400,), "invalid_audio", CONDITIONING),
    ("wrong_magic", "magic.wav", lambda: b"RIFX" + _wav(voice_like(4.0, 16000), 16000)[4:], (400,),
     "invalid_audio", None),
    ("garbage_bytes", "noise.wav", lambda: bytes(np.random.default_rng(9).integers(0, 256, 50000,
                                                                                 dtype=np.uint8)),
     (400,), "invalid_audio", None),
    ("pdf_named_wav", "lesson.wav", lambda: b"%PDF-1.4\n1 0 obj << /Type /Catalog >>\nendobj\n%%EOF",
     (400,), "invalid_audio", None),
    ("png_named_mp3", "photo.mp3", _png, (400,), "invalid_audio", None),
    ("text_named_flac", "notes.flac", lambda: "just some words\n".encode() * 50, (400,),
     "invalid_audio", None),
    ("zip_named_ogg", "archive.ogg", _zip, (400,), "invalid_audio", None),
    ("html_named_wav", "page.wav", lambda: b"<html><script>alert(1)</script></html>", (400,),
     "invalid_audio", None),
    ("rate_8k", "phone.wav", lambda: _wav(voice_like(5.0, 8000), 8000), (400,), "invalid_audio",
     CONDITIONING),
    ("five_minutes", "long.wav", lambda: _wav(voice_like(300.0, 16000), 16000), (400,),
     "invalid_audio", CONDITIONING),
    ("nan_samples", "nan.wav", lambda: _with_nan(float("nan")), (400,), "invalid_audio", CONDITIONING),
    ("inf_samples", "inf.wav", lambda: _with_nan(float("inf")), (400,), "invalid_audio", CONDITIONING),
    ("huge_chunk_size", "huge_header.wav", _huge_chunk_header, (400,), "invalid_audio", None),
    ("big_metadata_tiny_audio", "metadata.wav", _big_metadata_chunk, (400,), "invalid_audio",
     CONDITIONING),
    ("silence_only", "silence.wav", lambda: _wav(np.zeros(16000 * 5, np.float32), 16000), (400,),
     "invalid_audio", CONDITIONING),
]


def _tts(**fields: object) -> Callable[[], bytes]:
    return lambda: json.dumps({"text": "hi.", **fields}).encode()


def _raw(text: str) -> Callable[[], bytes]:
    return lambda: text.encode("utf-8", "surrogatepass")


def _speech(**fields: object) -> Callable[[], bytes]:
    body = {"model": "tts-1", "input": "hi.", "voice": "female_1", "response_format": "wav", **fields}
    return lambda: json.dumps(body).encode()


def _upload_body(maker: Callable[[], bytes]) -> Callable[[], bytes]:
    return lambda: json.dumps({"text": "hi.", "consent": True,
                               "prompt_audio": base64.b64encode(maker()).decode()}).encode()


def cases() -> list[Case]:
    """The whole corpus (bodies are built lazily: the five-minute WAV is 9.6 MB)."""
    out: list[Case] = []
    for cid, name, maker, expect, kind, needs in UPLOADS:
        out.append(Case(f"upload-{cid}", "upload", "POST", "/tts", _upload_body(maker), expect, kind,
                        needs, upload_name=name))
    out.append(Case("upload-over_size_limit", "upload", "POST", "/tts",
                    _upload_body(lambda: b"\0" * (21 * 1024 * 1024)), (413,), "payload_too_large"))

    text = [
        ("empty", _tts(text=""), "invalid_text"),
        ("whitespace_only", _tts(text=" \n\t\u3000 "), "invalid_text"),
        ("one_megabyte", _tts(text="a" * 1_000_000), "invalid_text"),
        ("megabyte_of_emoji", _tts(text="😀" * 300_000), "invalid_text"),
        ("control_characters_only", _tts(text="\x00\x01\x07\x1b\x7f"), "invalid_text"),
        ("only_emoji", _tts(text="😀🎉👍🏽🇨🇳"), "invalid_text"),
        ("rtl_arabic", _tts(text="مرحبا بالعالم"), "invalid_text"),
        ("rtl_hebrew", _tts(text="שלום עולם"), "invalid_text"),
        ("unsupported_mixed_scripts", _tts(text="Привет สวัสดี 안녕하세요"), "invalid_text"),
        ("ssml_tags", _tts(text='<speak><prosody rate="x-fast">Hello</prosody></speak>'), "invalid_text"),
        ("ssml_break_only", _tts(text='<break time="10s"/>'), "invalid_text"),
        ("bidi_and_zero_width_only", _tts(text="\u202e\u200f\u200b\ufeff"), "invalid_text"),
        ("punctuation_only", _tts(text="....!!!???。。"), "invalid_text"),
        ("lone_surrogate", _raw('{"text": "\\ud800\\udfff\\ud800"}'), None),
        ("speech_input_empty", _speech(input=""), "invalid_text"),
        ("speech_input_emoji", _speech(input="🙂🙃"), "invalid_text"),
        ("instruct_too_long", _tts(instruct="slowly " * 2000), "invalid_text"),
    ]
    out += [Case(f"text-{cid}", "text", "POST", "/v1/audio/speech" if cid.startswith("speech")
                 else "/tts", body, (400,), kind) for cid, body, kind in text]

    js = [
        ("text_is_number", _tts(text=123), (400,)),
        ("text_is_null", _tts(text=None), (400,)),
        ("text_is_object", _tts(text={"zh": "你好"}), (400,)),
        ("speaker_is_list", _tts(speaker=["female_1"]), (400,)),
        ("speed_is_string", _tts(speed="1.0"), (400,)),
        ("extra_field", _tts(volume=11), (400,)),
        ("deep_nesting", _raw('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"), (400,)),
        ("body_is_list", _raw('["hi."]'), (400,)),
        ("body_is_string", _raw('"hi."'), (400,)),
        ("body_is_null", _raw("null"), (400,)),
        ("empty_body", _raw(""), (400,)),
        ("malformed_json", _raw('{"text": "hi.",'), (400,)),
        ("invalid_utf8", lambda: b'{"text": "\xff\xfe\xfa"}', (400,)),
        ("invalid_base64", _tts(consent=True, prompt_audio="!!!not base64!!!"), (400,)),
        ("base64_bad_padding", _tts(consent=True, prompt_audio="UklGRg="), (400,)),
        ("data_uri_junk", _tts(consent=True, prompt_audio="data:audio/wav;base64,@@@@"), (400,)),
        ("speech_missing_input", lambda: json.dumps({"model": "tts-1", "voice": "female_1"}).encode(),
         (400,)),
        ("speech_bad_format", _speech(response_format="exe"), (400,)),
    ]
    out += [Case(f"json-{cid}", "json", "POST", "/v1/audio/speech" if cid.startswith("speech")
                 else "/tts", body, expect) for cid, body, expect in js]
    out.append(Case("json-wrong_content_type", "json", "POST", "/tts", _tts(),
                    (400, 415), content_type="text/plain"))
    out.append(Case("json-form_encoded", "json", "POST", "/tts", _tts(), (400, 415),
                    content_type="application/x-www-form-urlencoded"))  # curl -d without -H
    # the request line itself: a wrong method on a REST path, a path no route has (page at "/")
    for cid, method, path, expect, kind in [
            ("wrong_method_get_tts", "GET", "/tts", (405,), "method_not_allowed"),
            ("wrong_method_put_tts", "PUT", "/tts", (405,), "method_not_allowed"),
            ("wrong_method_get_speech", "GET", "/v1/audio/speech", (405,), "method_not_allowed"),
            ("wrong_method_post_health", "POST", "/health", (405,), "method_not_allowed"),
            ("unknown_route_transcriptions", "POST", "/v1/audio/transcriptions", (404,), "not_found")]:
        out.append(Case(f"json-{cid}", "json", method, path, lambda: b"", expect, kind))

    names = [
        ("job_id_traversal", _tts(job_id="../../etc/passwd"), (400,), "invalid_name"),
        ("job_id_nul", _tts(job_id="job\x00id"), (400,), "invalid_name"),
        ("job_id_very_long", _tts(job_id="j" * 10_000), (400,), "invalid_name"),
        ("voice_id_traversal", _tts(voice_id="../../prompts/teacher"), (400, 404), None),
        ("voice_id_nul", _tts(voice_id="teacher\x00.json"), (400, 404), None),
        ("voice_id_very_long", _tts(voice_id="v" * 100_000), (400, 404), None),
        ("speaker_traversal", _tts(speaker="../../../etc/passwd"), (400, 404), None),
        ("speaker_nul", _tts(speaker="female_1\x00"), (400, 404), None),
        ("speech_voice_traversal", _speech(voice="../models/kokoro-int8/voices"), (400, 404), None),
    ]
    out += [Case(f"name-{cid}", "name", "POST", "/v1/audio/speech" if cid.startswith("speech")
                 else "/tts", body, expect, kind) for cid, body, expect, kind in names]
    for cid, path in [("job_path_traversal", "/jobs/..%2F..%2Fetc%2Fpasswd"),
                      ("job_path_nul", "/jobs/a%00b"), ("job_path_very_long", "/jobs/" + "x" * 8000)]:
        out.append(Case(f"name-{cid}", "name", "GET", path, lambda: b"", (404,), "not_found"))
        out.append(Case(f"name-delete_{cid}", "name", "DELETE", path, lambda: b"", (404,), "not_found"))

    params = [
        ("speed_zero", _tts(speed=0.0)), ("speed_negative", _tts(speed=-1.0)),
        ("speed_nan", _raw('{"text": "hi.", "speed": NaN}')),
        ("speed_infinity", _raw('{"text": "hi.", "speed": Infinity}')),
        ("speed_minus_infinity", _raw('{"text": "hi.", "speed": -Infinity}')),
        ("speed_overflow", _raw('{"text": "hi.", "speed": 1e400}')),
        ("speed_1e9", _tts(speed=1e9)), ("speed_tiny", _tts(speed=1e-9)),
        ("speed_bool", _tts(speed=True)), ("speed_null", _tts(speed=None)),
        ("language_unknown", _tts(language="xx")), ("language_traversal", _tts(language="../en")),
        ("speech_speed_zero", _speech(speed=0)), ("speech_speed_nan", lambda: json.dumps(
            {"model": "tts-1", "input": "hi.", "voice": "female_1", "speed": float("nan")}).encode()),
        ("speech_speed_1e9", _speech(speed=1e9)), ("speech_speed_negative", _speech(speed=-1)),
    ]
    out += [Case(f"param-{cid}", "parameter", "POST", "/v1/audio/speech" if cid.startswith("speech")
                 else "/tts", body, (400,)) for cid, body in params]
    return out


@dataclass(frozen=True)
class WyomingCase:
    """Bytes a Wyoming client sends, the ``error`` event's code they must get, and whether the
    server then closes the connection (broken framing) or goes on reading (intact framing).
    ``half_close``: the client then shuts its sending side (an event cut off by the end of input)."""

    id: str
    data: bytes = field(repr=False)
    code: str
    closes: bool
    half_close: bool = False

    def describe(self) -> dict:
        return {"id": self.id, "code": self.code, "closes": self.closes, "bytes": len(self.data)}


def _frame(header: object, data: bytes = b"", payload: bytes = b"") -> bytes:
    """One Wyoming event as a client would send it, whatever ``header`` holds."""
    return json.dumps(header).encode() + b"\n" + data + payload


def wyoming_cases() -> list[WyomingCase]:
    """Malformed and out-of-order events for the Wyoming server (cosyedge/web/wyoming_events.py)."""
    text = json.dumps({"text": "hello."}).encode()
    kept = [  # the framing holds: an error event, then the connection reads the next event
        ("text_is_number", _frame({"type": "synthesize", "data": {"text": 123}}), "event_field_invalid"),
        ("text_missing", _frame({"type": "synthesize", "data": {}}), "event_field_invalid"),
        ("voice_is_string", _frame({"type": "synthesize", "data": {"text": "hi.", "voice": "child"}}),
         "event_field_invalid"),
        ("voice_name_is_list", _frame({"type": "synthesize-start", "data": {"voice": {"name": ["x"]}}}),
         "event_field_invalid"),
        ("unknown_event", _frame({"type": "transcribe", "data": {"language": "en"}}), "event_unknown"),
        ("unknown_event_with_payload", _frame({"type": "audio-chunk", "payload_length": 4}, payload=b"\0" * 4),
         "event_unknown"),
        ("chunk_without_start", _frame({"type": "synthesize-chunk", "data": {"text": "hi."}}),
         "stream_not_started"),
        ("stop_without_start", _frame({"type": "synthesize-stop"}), "stream_not_started"),
        ("start_twice", _frame({"type": "synthesize-start"}) + _frame({"type": "synthesize-start"}),
         "stream_already_started"),
    ]
    broken = [  # the next event's start is unknown: an error event, then the server closes
        ("header_not_json", b"this is not json\n", "event_header_invalid"),
        ("header_is_list", b'["synthesize"]\n', "event_header_invalid"),
        ("header_without_type", _frame({"data": {"text": "hi."}}), "event_header_invalid"),
        ("header_type_is_number", _frame({"type": 7}), "event_header_invalid"),
        ("header_invalid_utf8", b'{"type": "synthesize", "data": {"text": "\xff\xfe"}}\n', "event_header_invalid"),
        ("header_data_is_string", _frame({"type": "synthesize", "data": "hello"}), "event_header_invalid"),
        ("header_too_long", b'{"type": "synthesize", "pad": "' + b"x" * 70_000 + b'"}\n',
         "event_header_too_long"),
        ("data_length_negative", _frame({"type": "synthesize", "data_length": -5}, text), "event_length_invalid"),
        ("data_length_not_a_number", _frame({"type": "synthesize", "data_length": "12"}, text),
         "event_length_invalid"),
        ("data_length_fraction", _frame({"type": "synthesize", "data_length": 1.5}, text),
         "event_length_invalid"),
        ("payload_length_negative", _frame({"type": "describe", "payload_length": -1}), "event_length_invalid"),
        ("data_length_huge", _frame({"type": "synthesize", "data_length": 10 ** 12}), "event_too_large"),
        ("data_invalid_utf8", _frame({"type": "synthesize", "data_length": 16}, b'{"text": "\xff\xfe\xfa."}'[:16]),
         "event_data_invalid"),
        ("data_not_json", _frame({"type": "synthesize", "data_length": 5}, b"hello"), "event_data_invalid"),
        ("data_is_list", _frame({"type": "synthesize", "data_length": 9}, b'["hello"]'), "event_data_invalid"),
        ("data_cut_off", _frame({"type": "synthesize", "data_length": 100}, text), "event_truncated"),
        ("header_cut_off", b'{"type": "synthesize", "data": {"te', "event_truncated"),
    ]
    return ([WyomingCase(f"wyoming-{cid}", data, code, False) for cid, data, code in kept]
            + [WyomingCase(f"wyoming-{cid}", data, code, True, half_close=cid.endswith("cut_off"))
               for cid, data, code in broken])


def upload_files() -> dict[str, bytes]:
    """The raw upload files by name (what the page's upload box would receive)."""
    return {name: maker() for _, name, maker, *_ in UPLOADS}


def write_corpus(out: Path) -> list[Case]:
    """Write every body, the raw upload files and cases.json under ``out``; return the cases."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "files").mkdir(exist_ok=True)
    all_cases = cases()
    for case in all_cases:
        (out / f"{case.id}.body").write_bytes(case.body())
    for name, data in upload_files().items():
        (out / "files" / name).write_bytes(data)
    (out / "cases.json").write_text(json.dumps([c.describe() for c in all_cases], indent=1,
                                               ensure_ascii=False), "utf-8")
    (out / "wyoming").mkdir(exist_ok=True)
    wyoming = wyoming_cases()
    for event in wyoming:
        (out / "wyoming" / f"{event.id}.bin").write_bytes(event.data)
    (out / "wyoming.json").write_text(json.dumps([c.describe() for c in wyoming], indent=1), "utf-8")
    return all_cases


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT,
                        help=f"where to write the cases (default {DEFAULT_OUT.relative_to(ROOT)})")
    out = parser.parse_args(argv).out
    written = write_corpus(out)
    groups: dict[str, int] = {}
    for case in written:
        groups[case.group] = groups.get(case.group, 0) + 1
    sys.stdout.write(f"{len(written)} cases in {out}: {groups}; {len(wyoming_cases())} Wyoming cases "
                     f"in {out / 'wyoming'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
