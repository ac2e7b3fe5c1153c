"""The voice file: one saved voice as the ``.zip`` that export writes and import reads.

Members: ``voice.wav`` (the conditioned prompt), ``transcript.txt``, ``meta.json`` (the library's
record, with the voice's ``id``) and, since encodings travel, ``encodings.json`` with one
``encodings/<n>/<array>.npy`` per array of each encoding: what the box made of the voice for a model
(a CosyVoice prompt's speech tokens, speaker embedding and flow state; the embedded engine's chosen
built-in voice, which has no arrays). Each encoding names the model it was made for by id and by
:func:`cosyedge.catalog.manifest.weights_digest`, the prompt format and cache-key version it was made
under, and the transcript it was keyed with.

Everything is validated before anything is written: exactly the known members, each size-limited;
meta and encodings as JSON objects; arrays as ``.npy`` read without pickle, of plain numeric dtypes
and the declared shape, matching their sha256, floats finite. An older file with the first three
members alone reads as a voice without encodings.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cosyedge.errors import InputError, PayloadTooLargeError

WAV_NAME, TRANSCRIPT_NAME, META_NAME = "voice.wav", "transcript.txt", "meta.json"
ENCODINGS_NAME = "encodings.json"
LIBRARY_FORMAT = 1
#: The encodings part's own format: bump when its fields change (an import skips another's encodings).
ENCODINGS_FORMAT = 1
MAX_TRANSCRIPT_CHARS = 2000
MAX_META_BYTES = 64 * 1024
MAX_ENCODINGS = 8
MAX_ARRAYS = 16  # per encoding
MAX_ARRAY_BYTES = 32 * 1024 * 1024
MAX_ENCODINGS_BYTES = 64 * 1024 * 1024  # all arrays together
#: Plain numeric dtypes an encoding's arrays may have (never object, never structured).
ARRAY_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                          "float16", "float32", "float64"})
_ARRAY_MEMBER_RE = re.compile(r"^encodings/(\d{1,2})/([A-Za-z0-9_]{1,64})\.npy$")
_MODEL_FIELD_RE = re.compile(r"^\w[\w.:+-]{0,99}$")  # never "..": a model id names a folder
#: What ``zipfile`` raises opening a damaged or foreign zip or reading its members: a bad CRC or header
#: (BadZipFile), corrupt deflate data (zlib.error), a password (RuntimeError), an unknown compression
#: method or zip version (NotImplementedError), a cut-off or absurd offset (EOFError, ValueError, OSError).
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError, EOFError, ValueError, OSError)


@dataclass(frozen=True)
class Encoding:
    """One encoding a voice file carries: for which model, keyed how, and its data."""

    engine: str
    model_id: str
    model_digest: str
    prompt_format: int
    cache_version: int
    transcript: str | None
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    #: What the voice sounds like there when that is a named voice (the closest built-in voice).
    sounds: str | None = None

    @property
    def model(self) -> str:
        return f"{self.engine}/{self.model_id}"


@dataclass(frozen=True)
class VoiceFile:
    """A voice file read and checked: the library's three members and the encodings that were valid
    (``refused``: the encodings left out, each with why; the voice itself is never refused for them)."""

    meta: dict[str, Any]
    transcript: str
    wav: bytes
    encodings: tuple[Encoding, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


def write(wav: bytes, transcript: bytes, meta: bytes, encodings: list[Encoding] = ()) -> bytes:
    """The zip of a voice and its encodings (stored in the order given)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(WAV_NAME, wav)
        zf.writestr(TRANSCRIPT_NAME, transcript)
        zf.writestr(META_NAME, meta)
        if encodings:
            entries = []
            for index, encoding in enumerate(encodings):
                arrays = []
                for name, array in sorted(encoding.arrays.items()):
                    blob = _npy(array)
                    member = f"encodings/{index}/{name}.npy"
                    zf.writestr(member, blob)
                    arrays.append({"name": name, "file": member, "dtype": str(array.dtype),
                                   "shape": list(array.shape), "sha256": hashlib.sha256(blob).hexdigest()})
                entries.append({"engine": encoding.engine, "model_id": encoding.model_id,
                                "model_digest": encoding.model_digest, "prompt_format": encoding.prompt_format,
                                "cache_version": encoding.cache_version, "transcript": encoding.transcript,
                                "sounds": encoding.sounds, "meta": encoding.meta, "arrays": arrays})
            zf.writestr(ENCODINGS_NAME, json.dumps({"format": ENCODINGS_FORMAT, "encodings": entries},
                                                   ensure_ascii=False))
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def read(data: bytes, max_bytes: int) -> VoiceFile:
    """Read and check a voice file; an InputError / PayloadTooLargeError names what is wrong with the
    voice, while a bad encoding is only left out (``VoiceFile.refused``)."""
    if len(data) > max_bytes:
        raise PayloadTooLargeError(f"the voice file is {len(data) / 1e6:.1f} MB; the limit is "
                                   f"{max_bytes / 1e6:.1f} MB", code="voice_file_too_large",
                                   size_mb=len(data) / 1e6, limit_mb=max_bytes / 1e6)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except ZIP_ERRORS:
        raise InputError("not a voice file: expected a .zip exported by cosyedge", code="voice_file_not_zip") from None
    with zf:
        members = {info.filename: info for info in zf.infolist()}
        required = {WAV_NAME, TRANSCRIPT_NAME, META_NAME}
        extra = set(members) - required - {ENCODINGS_NAME}
        if not required <= set(members) or any(not _ARRAY_MEMBER_RE.match(m) for m in extra) \
                or (extra and ENCODINGS_NAME not in members) or len(members) > 4 + MAX_ENCODINGS * MAX_ARRAYS:
            raise InputError(f"not a voice file: it must hold {', '.join(sorted(required))} (and, from a newer "
                             f"box, {ENCODINGS_NAME} with encodings/<n>/<array>.npy); found "
                             f"{', '.join(sorted(members)[:12]) or 'nothing'}", code="voice_file_members")
        limits = {WAV_NAME: max_bytes, TRANSCRIPT_NAME: 4 * MAX_TRANSCRIPT_CHARS, META_NAME: MAX_META_BYTES,
                  ENCODINGS_NAME: MAX_META_BYTES * MAX_ENCODINGS}
        for member, info in members.items():
            limit = limits.get(member, MAX_ARRAY_BYTES)
            if info.file_size > limit:
                raise PayloadTooLargeError(f"{member} in the voice file is too large ({info.file_size} bytes; "
                                           f"limit {limit})", code="voice_file_member_too_large", member=member,
                                           size=info.file_size, limit=limit)
        if sum(info.file_size for m, info in members.items() if m.startswith("encodings/")) > MAX_ENCODINGS_BYTES:
            raise PayloadTooLargeError(f"the voice file's encodings are over {MAX_ENCODINGS_BYTES} bytes",
                                       code="voice_file_member_too_large", member="encodings/",
                                       size=sum(i.file_size for i in members.values()), limit=MAX_ENCODINGS_BYTES)
        try:
            blobs = {m: zf.read(m) for m in members}
        except ZIP_ERRORS as exc:
            raise InputError(f"the voice file is damaged: {exc}", code="voice_file_damaged") from None
    meta = parse_meta(blobs[META_NAME])
    try:
        transcript = blobs[TRANSCRIPT_NAME].decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("the voice file's transcript is not UTF-8 text",
                         code="voice_file_transcript_not_utf8") from None
    encodings, refused = _encodings(blobs) if ENCODINGS_NAME in blobs else ((), ())
    return VoiceFile(meta=meta, transcript=transcript, wav=blobs[WAV_NAME], encodings=encodings, refused=refused)


def parse_meta(blob: bytes) -> dict[str, Any]:
    """``meta.json`` as a dict, its name, engine and model id checked."""
    try:
        meta = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"the voice file's meta.json is not valid JSON: {exc}",
                         code="voice_file_meta_not_json") from None
    if not isinstance(meta, dict) or meta.get("format") != LIBRARY_FORMAT:
        raise InputError(f"the voice file's meta.json is not format {LIBRARY_FORMAT}",
                         code="voice_file_meta_format")
    for key in ("name", "engine", "model_id"):
        value = meta.get(key)
        # engine may be "" (saved without encoding); model_id names the model it was saved for
        pattern = r"[\w.:+-]{0,100}" if key == "engine" else r"[\w.:+-]{1,100}"
        if not isinstance(value, str) or (key != "name" and not re.fullmatch(pattern, value)):
            raise InputError(f"the voice file's meta.json has an invalid {key!r}",
                             code="voice_file_meta_field", field=key)
    return meta


def _encodings(blobs: dict[str, bytes]) -> tuple[tuple[Encoding, ...], tuple[tuple[str, str], ...]]:
    """The valid encodings of ``encodings.json`` and, for each one left out, its model and why."""
    try:
        document = json.loads(blobs[ENCODINGS_NAME].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return (), (("*", f"{ENCODINGS_NAME} is not JSON ({str(exc)[:60]})"),)
    if not isinstance(document, dict) or document.get("format") != ENCODINGS_FORMAT \
            or not isinstance(document.get("encodings"), list):
        return (), (("*", f"{ENCODINGS_NAME} is not format {ENCODINGS_FORMAT}"),)
    good, refused = [], []
    for index, entry in enumerate(document["encodings"][:MAX_ENCODINGS]):
        try:
            good.append(_encoding(entry, index, blobs))
        except ValueError as exc:
            model = (f"{entry.get('engine')}/{entry.get('model_id')}" if isinstance(entry, dict) else f"#{index}")
            refused.append((str(model)[:120], str(exc)[:200]))
    return tuple(good), tuple(refused)


def _encoding(entry: Any, index: int, blobs: dict[str, bytes]) -> Encoding:
    """One entry checked against its arrays; ValueError saying what is wrong."""
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    for key in ("engine", "model_id", "model_digest"):
        if not isinstance(entry.get(key), str) or not _MODEL_FIELD_RE.match(entry[key]):
            raise ValueError(f"invalid {key}")
    for key in ("prompt_format", "cache_version"):
        if isinstance(entry.get(key), bool) or not isinstance(entry.get(key), int):
            raise ValueError(f"invalid {key}")
    transcript, sounds, meta = entry.get("transcript"), entry.get("sounds"), entry.get("meta")
    if transcript is not None and (not isinstance(transcript, str) or len(transcript) > MAX_TRANSCRIPT_CHARS):
        raise ValueError("invalid transcript")
    if sounds is not None and (not isinstance(sounds, str) or not _MODEL_FIELD_RE.match(sounds)):
        raise ValueError("invalid sounds")
    if not isinstance(meta, dict) or len(json.dumps(meta)) > MAX_META_BYTES:
        raise ValueError("invalid meta")
    declared = entry.get("arrays")
    if not isinstance(declared, list) or len(declared) > MAX_ARRAYS:
        raise ValueError("invalid arrays")
    arrays = {}
    for item in declared:
        name, array = _array(item, index, blobs)
        arrays[name] = array
    return Encoding(engine=entry["engine"], model_id=entry["model_id"], model_digest=entry["model_digest"],
                    prompt_format=entry["prompt_format"], cache_version=entry["cache_version"],
                    transcript=transcript, meta=meta, arrays=arrays, sounds=sounds)


def _array(item: Any, index: int, blobs: dict[str, bytes]) -> tuple[str, np.ndarray]:
    """One declared array: its member, read without pickle and checked against the declaration."""
    if not isinstance(item, dict) or not isinstance(item.get("file"), str):
        raise ValueError("invalid array entry")
    match = _ARRAY_MEMBER_RE.match(item["file"])
    if match is None or int(match.group(1)) != index or match.group(2) != item.get("name"):
        raise ValueError(f"array {str(item.get('file'))[:80]!r} is not this encoding's")
    blob = blobs.get(item["file"])
    if blob is None:
        raise ValueError(f"{item['file']} is missing")
    if hashlib.sha256(blob).hexdigest() != item.get("sha256"):
        raise ValueError(f"{item['file']} does not match its sha256")
    try:
        array = np.lib.format.read_array(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{item['file']} is not a plain array ({str(exc)[:80]})") from None
    if str(array.dtype) not in ARRAY_DTYPES or str(array.dtype) != item.get("dtype") \
            or list(array.shape) != item.get("shape") or array.ndim > 6:
        raise ValueError(f"{item['file']} is not the {item.get('dtype')} {item.get('shape')} it declares")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise ValueError(f"{item['file']} holds values that are not finite")
    return match.group(2), array
