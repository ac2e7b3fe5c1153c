"""Encoded-prompt cache and the saved voice library, both under the prompts directory.

``PromptCache`` (``prompts/cache/``): conditioned prompt audio + transcript + engine + model id ->
the engine's encoded :class:`VoicePrompt`, keyed by a sha256 of those four, stored as one versioned
file per entry, bounded by count and bytes with least-recently-used eviction. One rule says which
transcript an encoding reads and is keyed by (:func:`key_transcript`: none on an engine that cannot
clone, which encodes from the sound alone), so an encoding made at save time is the one found at use
time. A corrupt or stale entry is rebuilt (with a warning), and so is an entry the engine no longer
makes (``engine.is_current``: the embedded engine's closest built-in voice replaced its voice match;
the rebuilt voice carries ``changed_from`` once); a directory that cannot be written turns the cache
into a memory cache (with a warning) instead of failing requests.

``VoiceLibrary`` (``prompts/library/<id>/``): a saved voice is the conditioned prompt WAV, its
transcript and ``meta.json`` (which also says where the transcript came from: typed by a person, or
heard by the offline recognizer with its confidence, :mod:`cosyedge.voices.transcripts`). The library stores audio, not encodings, so a saved voice works with
every engine (each encodes it through the cache). Names are validated; ids are safe slugs; every
path is checked to stay under the library root; writes are atomic (temp folder + rename); an import
is validated completely before anything is written.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import unicodedata
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from cosyedge.audio import ConditionedPrompt, condition_prompt
from cosyedge.voices.consent import ConsentRecord
from cosyedge.engines.base import VoicePrompt
from cosyedge.errors import InputError, NameError_, NotFoundError, PayloadTooLargeError
from cosyedge.files import write_atomic

logger = logging.getLogger(__name__)

#: Bump when the key recipe or the entry layout changes; older entries are then swept as stale.
CACHE_VERSION = 1
_ENTRY_RE = re.compile(r"^([0-9a-f]{64})\.v(\d+)\.npz$")


def prompt_key(pcm: bytes, transcript: str | None, engine: str, model_id: str) -> str:
    """sha256 over length-prefixed fields, so no two different tuples can collide by concatenation."""
    h = hashlib.sha256(f"cosyedge-prompt-v{CACHE_VERSION}".encode())
    for part in (pcm, (transcript or "").strip().encode("utf-8"), engine.encode(), model_id.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def key_transcript(engine: Any, transcript: str | None) -> str | None:
    """The transcript an engine's encoding reads and the cache keys it by: the stripped transcript on
    an engine that clones natively, None (no transcript, whatever was typed) on one that cannot."""
    capabilities = getattr(engine, "capabilities", None)
    if capabilities is not None and not capabilities.native_clone:
        return None
    return (transcript or "").strip() or None


def _touch(path: Path) -> None:
    """mtime is the LRU clock; set it from time_ns() because file-system timestamps are coarse."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


class PromptCache:
    """Content-hash cache of encoded prompts; ``hits``/``misses``/``rebuilds`` count what happened."""

    def __init__(self, directory: Path, max_entries: int = 64, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.rebuilds = 0
        self.refreshed = 0
        self._memory: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.on_disk = self._prepare()

    def _prepare(self) -> bool:
        """Create the directory and prove it is writable; sweep entries of other versions."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self.directory / ".write-test", b"ok")
            (self.directory / ".write-test").unlink()
        except OSError as exc:
            logger.warning("prompt cache %s is not writable (%s); caching in memory only",
                           self.directory, exc)
            return False
        for path in self.directory.iterdir():
            match = _ENTRY_RE.match(path.name)
            if path.name.startswith(".tmp-") or (match and int(match.group(2)) != CACHE_VERSION):
                logger.warning("removing stale prompt cache file %s", path.name)
                path.unlink(missing_ok=True)
        return True

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.v{CACHE_VERSION}.npz"

    def get_or_encode(self, engine: Any, prompt: ConditionedPrompt, transcript: str | None, *,
                      cancelled: Callable[[], bool] | None = None) -> VoicePrompt:
        """The cached encoding of ``prompt`` for ``engine``, encoding (once) on a miss; ``cancelled``
        goes to the engine (an encoding it stops is not cached). ``transcript`` is read through
        :func:`key_transcript`. An entry the engine no longer makes (``engine.is_current`` false) is
        encoded again and stored; when it sounds different (``engine.sounded``) it is returned with
        ``meta["changed_from"]`` naming what it was (for this answer only: stored without)."""
        transcript = key_transcript(engine, transcript)
        key = prompt_key(prompt.pcm_bytes(), transcript, engine.name, engine.model_id)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        try:
            with key_lock:  # two requests for the same new prompt encode it once
                cached = self._load(key, engine.name, engine.model_id)
                is_current = getattr(engine, "is_current", None)
                if cached is not None and (not callable(is_current) or is_current(cached)):
                    self.hits += 1
                    return cached
                self.misses += 1
                encoded = engine.encode_prompt(prompt.pcm, prompt.sample_rate, transcript,
                                               cancelled=cancelled)
                self._store(key, encoded.to_bytes())
                if cached is not None:  # an older encoding, made again
                    self.refreshed += 1
                    logger.info("prompt cache entry %s (%s) was made again", key[:12], cached.meta.get("method"))
                    sounded = getattr(engine, "sounded", None)
                    before = sounded(cached) if callable(sounded) else None
                    if before is not None and before != sounded(encoded):
                        encoded = replace(encoded, meta={**encoded.meta, "changed_from": before})
                return encoded
        finally:
            with self._lock:
                self._key_locks.pop(key, None)

    def _load(self, key: str, engine: str, model_id: str) -> VoicePrompt | None:
        with self._lock:
            data = self._memory.get(key)
            if data is not None:
                self._memory.move_to_end(key)
        path = self._path(key)
        if data is None and self.on_disk:
            try:
                data = path.read_bytes()
                _touch(path)
            except FileNotFoundError:
                return None
            except OSError as exc:
                logger.warning("cannot read prompt cache entry %s (%s); encoding again", path.name, exc)
                return None
        if data is None:
            return None
        try:
            prompt = VoicePrompt.from_bytes(data)
            if prompt.engine != engine or prompt.model_id != model_id:
                raise ValueError(f"entry is for {prompt.engine}/{prompt.model_id}")
        except ValueError as exc:
            logger.warning("prompt cache entry %s is corrupt or stale (%s); rebuilding it", key[:12], exc)
            self.rebuilds += 1
            with self._lock:
                self._memory.pop(key, None)
            if self.on_disk:
                path.unlink(missing_ok=True)
            return None
        return prompt

    def _store(self, key: str, data: bytes) -> None:
        if self.on_disk:
            try:
                write_atomic(self._path(key), data)
                _touch(self._path(key))
                self._evict_disk()
                return
            except OSError as exc:
                logger.warning("prompt cache %s became unwritable (%s); caching in memory only",
                               self.directory, exc)
                self.on_disk = False
        with self._lock:
            self._memory[key] = data
            self._memory.move_to_end(key)
            while self._memory and (len(self._memory) > self.max_entries
                                    or sum(map(len, self._memory.values())) > self.max_bytes):
                self._memory.popitem(last=False)

    def _evict_disk(self) -> None:
        entries = []
        for path in self.directory.iterdir():
            if _ENTRY_RE.match(path.name):
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                entries.append((st.st_mtime_ns, st.st_size, path))
        entries.sort()
        total = sum(size for _, size, _ in entries)
        while entries and (len(entries) > self.max_entries or total > self.max_bytes):
            _, size, path = entries.pop(0)
            path.unlink(missing_ok=True)
            total -= size
            logger.debug("evicted prompt cache entry %s", path.name)

    def __len__(self) -> int:
        if self.on_disk:
            return sum(1 for p in self.directory.iterdir() if _ENTRY_RE.match(p.name))
        return len(self._memory)


# ---------------------------------------------------------------------------------------------------
# Voice library

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_CJK_NAME_RE = re.compile(r"^[\u3400-\u4dbf\u4e00-\u9fffA-Za-z0-9 ._-]{1,32}$")
LIBRARY_FORMAT = 1
WAV_NAME, TRANSCRIPT_NAME, META_NAME = "voice.wav", "transcript.txt", "meta.json"
MAX_TRANSCRIPT_CHARS = 2000
_MAX_META_BYTES = 64 * 1024
#: What :meth:`VoiceLibrary.record_encoding` says a voice sounded like on a model it was encoded for
#: before its sound was recorded.
EARLIER_ENCODING = "an earlier encoding"
#: What ``zipfile`` raises opening a damaged or foreign zip or reading its members: a bad CRC or header
#: (BadZipFile), corrupt deflate data (zlib.error), a password (RuntimeError), an unknown compression
#: method or zip version (NotImplementedError), a cut-off or absurd offset (EOFError, ValueError, OSError).
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError, EOFError, ValueError,
               OSError)


def _rename_to_new(source: Path, target: Path, voice_id: str) -> None:
    """Move a voice folder to a name no voice has; NameError_ when one appeared meanwhile (two saves
    of the same new name at once: rename onto a non-empty folder fails, the first one wins)."""
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise NameError_(f"a saved voice with id {voice_id!r} already exists; "
                             "choose another name", code="voice_id_taken", voice_id=voice_id) from None
        raise


@dataclass(frozen=True)
class VoiceInfo:
    """What the library knows about a saved voice (``meta.json``)."""

    id: str
    name: str
    engine: str
    model_id: str
    duration_s: float
    created: float
    notes: tuple[str, ...] = ()
    #: When the user confirmed the speaker's consent (cosyedge.voices.consent); None: saved before it was
    #: asked for ("consent not recorded"), still usable.
    consent: ConsentRecord | None = None
    #: The models this voice has been encoded for on this box, as ``engine/model_id``: recorded by
    #: :meth:`VoiceLibrary.record_encoding` when a job uses it (the prompt cache may evict the
    #: encoding itself; this record stays with the voice).
    encoded_for: tuple[str, ...] = ()
    #: What the voice sounds like on each of those models where that is a named voice, as
    #: ``(engine/model_id, name)`` pairs: the closest built-in voice an engine that cannot clone
    #: chose (``engine.sounded``), recorded with the encoding, so a later choice that differs is told.
    sounds: tuple[tuple[str, str], ...] = ()
    #: Where ``transcript.txt`` came from: "user" (typed or edited), "asr" (heard offline, with the
    #: recognizer's ``transcript_confidence``), None when there is none.
    transcript_source: str | None = None
    transcript_confidence: float | None = None


def name_to_id(name: Any) -> tuple[str, str]:
    """Validate a voice name; return (display name, id). Raises NameError_ naming the problem.

    Allowed: ``^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$`` (id: lower-case, spaces -> '-'), or a Chinese name
    of at most 32 characters (id: its pinyin, e.g. 王老师 -> wang-lao-shi).
    """
    if not isinstance(name, str):
        raise NameError_("the voice name must be text", code="voice_name_not_text")
    name = unicodedata.normalize("NFC", name).strip()
    if not name:
        raise NameError_("the voice name is empty", code="voice_name_empty")
    if "\x00" in name or any(unicodedata.category(c) == "Cc" for c in name):
        raise NameError_("the voice name contains control characters (such as NUL)",
                         code="voice_name_control_chars")
    if "/" in name or "\\" in name:
        raise NameError_("the voice name may not contain '/' or '\\'", code="voice_name_slash")
    if len(name) > 64:
        raise NameError_(f"the voice name is {len(name)} characters long; at most 64 are allowed",
                         code="voice_name_too_long", length=len(name), limit=64)
    if NAME_RE.match(name):
        voice_id = re.sub(r"-{2,}", "-", name.lower().replace(" ", "-"))
    elif _CJK_NAME_RE.match(name) and re.search(r"[\u3400-\u9fff]", name):
        from pypinyin import lazy_pinyin

        syllables = [re.sub(r"[^a-z0-9]", "", s.lower()) for s in lazy_pinyin(name)]
        voice_id = "-".join(s for s in syllables if s)[:64].strip("-._")
    else:
        raise NameError_(f"the voice name {name!r} is not allowed: use letters, digits, spaces, '.', '_' "
                         "or '-', starting with a letter or digit (or a Chinese name of up to 32 characters)",
                         code="voice_name_not_allowed", name=name)
    if not ID_RE.match(voice_id):
        raise NameError_(f"the voice name {name!r} does not give a usable id",
                         code="voice_name_no_id", name=name)
    return name, voice_id


def refuse_preset_name(name: Any, presets: Iterable[str]) -> None:
    """Refuse saving a voice under a preset's name (case, spaces for ``_`` and runs of spaces aside).

    A voice is asked for by name (OpenAI ``voice``, Wyoming) and a preset wins, so a saved voice
    called like a preset could never be used. A name that is not text passes: ``name_to_id``
    words that refusal.
    """
    if not isinstance(name, str):
        return
    folded = " ".join(name.split()).casefold()
    for preset in presets:
        if folded in (preset.casefold(), preset.casefold().replace("_", " ")):
            raise NameError_(f"{name!r} is the name of a preset voice; choose another name",
                             code="voice_name_preset", name=name, preset=preset)


class VoiceLibrary:
    """Saved voices under one root folder; see the module doc for the layout and the rules."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._meta_lock = threading.Lock()
        self._restore_interrupted_overwrites()

    def _restore_interrupted_overwrites(self) -> None:
        """Put back a voice whose overwrite was killed between its two renames (see ``save``).

        ``.trash-<id>-<pid>`` is the old folder moved aside; when ``<id>`` is missing the new one
        never arrived, so the old one returns; otherwise the leftover is removed. Runs when the
        library is opened (process start), before this process saves anything.
        """
        if not self.directory.is_dir():
            return
        for trash in self.directory.glob(".trash-*"):
            voice_id = trash.name[len(".trash-"):].rsplit("-", 1)[0]
            if not trash.is_dir() or trash.is_symlink() or not ID_RE.match(voice_id):
                continue
            target = self.directory / voice_id
            try:
                if target.exists():
                    shutil.rmtree(trash)
                else:
                    os.rename(trash, target)
                    logger.warning("restored saved voice %s after an interrupted overwrite", voice_id)
            except OSError as exc:
                logger.warning("could not clean up %s: %s", trash.name, exc)

    def _root(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory.resolve()

    def _path(self, voice_id: str) -> Path:
        """The folder of ``voice_id``, refused unless it is a valid id directly under the root."""
        if not isinstance(voice_id, str) or not ID_RE.match(voice_id):
            raise NameError_(f"{voice_id!r} is not a valid voice id", code="voice_id_invalid",
                             voice_id=voice_id)
        root = self._root()
        path = (root / voice_id).resolve()
        if path.parent != root:
            raise NameError_(f"{voice_id!r} is not a valid voice id", code="voice_id_invalid",
                             voice_id=voice_id)
        return path

    def _existing(self, voice_id: str) -> Path:
        path = self._path(voice_id)
        if not path.is_dir() or path.is_symlink() or not (path / META_NAME).is_file():
            raise NotFoundError(f"no saved voice {voice_id!r}; saved voices: "
                                f"{', '.join(v.id for v in self.list()) or 'none'}",
                                code="saved_voice_unknown", voice_id=voice_id)
        return path

    def list(self) -> list[VoiceInfo]:
        """All saved voices, sorted by name; unreadable folders are skipped with a warning."""
        if not self.directory.is_dir():
            return []
        voices = []
        for path in sorted(self.directory.iterdir()):
            if path.is_dir() and not path.is_symlink() and ID_RE.match(path.name):
                try:
                    voices.append(self._read_meta(path))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    logger.warning("skipping unreadable saved voice %s: %s", path.name, exc)
        return sorted(voices, key=lambda v: v.name.lower())

    def get(self, voice_id: str) -> VoiceInfo:
        return self._read_meta(self._existing(voice_id))

    def load(self, voice_id: str) -> tuple[ConditionedPrompt, str, VoiceInfo]:
        """The saved prompt audio, its transcript and its info."""
        import soundfile as sf

        path = self._existing(voice_id)
        try:
            audio, rate = sf.read(path / WAV_NAME, dtype="float32")
            with self._meta_lock:  # the transcript and the record that says where it came from
                transcript = (path / TRANSCRIPT_NAME).read_text(encoding="utf-8")
                info = self._read_meta(path)
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:  # sf: RuntimeError
            raise NotFoundError(f"saved voice {voice_id!r} is damaged ({exc}); delete it and save it "
                                "again", code="saved_voice_damaged", voice_id=voice_id) from None
        prompt = ConditionedPrompt(pcm=np.asarray(audio, dtype=np.float32).reshape(-1), sample_rate=rate,
                                   source_rate=rate, notes=list(info.notes))
        return prompt, transcript, info

    def save(self, name: str, prompt: ConditionedPrompt, transcript: str | None, *, engine: str,
             model_id: str, consent: ConsentRecord | None = None, overwrite: bool = False,
             transcript_source: str | None = None, transcript_confidence: float | None = None) -> VoiceInfo:
        """Save a conditioned prompt as a named voice (atomically: all three files or nothing).
        ``consent``: the record of :func:`cosyedge.voices.consent.require_consent` (None: not recorded, as
        for a voice saved before consent was asked for; the service always passes one).
        ``transcript_source``: see :class:`VoiceInfo` (default: "user" when there is a transcript)."""
        display, voice_id = name_to_id(name)
        transcript = _check_transcript(transcript)
        source, confidence = _transcript_origin(transcript, transcript_source, transcript_confidence)
        if not overwrite:
            voice_id = self._id_for(display, voice_id)
        target = self._path(voice_id)
        info = VoiceInfo(id=voice_id, name=display, engine=engine, model_id=model_id,
                         duration_s=round(prompt.duration_s, 3), created=time.time(),
                         notes=tuple(prompt.notes), consent=consent, transcript_source=source,
                         transcript_confidence=confidence)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self._root()))
        try:
            write_atomic(tmp / WAV_NAME, _float_wav(prompt))
            write_atomic(tmp / TRANSCRIPT_NAME, transcript.encode("utf-8"))
            write_atomic(tmp / META_NAME, _meta_bytes(info))
            if target.exists():
                trash = target.with_name(f".trash-{voice_id}-{os.getpid()}")
                os.rename(target, trash)
                os.rename(tmp, target)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                _rename_to_new(tmp, target, voice_id)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        logger.info("saved voice %s (%s)", voice_id, display)
        return info

    def rename(self, voice_id: str, new_name: str, *, presets: Iterable[str] = ()) -> VoiceInfo:
        """Rename a voice (its id follows the name); a name of one of ``presets`` is refused."""
        path = self._existing(voice_id)
        display, new_id = name_to_id(new_name)
        refuse_preset_name(display, presets)
        if new_id != voice_id:
            new_id = self._id_for(display, new_id)
        target = self._path(new_id)
        info = self._read_meta(path)
        info = replace(info, id=new_id, name=display)
        if new_id != voice_id:  # move first: a folder is never left with another voice's meta
            _rename_to_new(path, target, new_id)
        try:
            write_atomic(target / META_NAME, _meta_bytes(info))
        except OSError:
            if new_id != voice_id:
                os.rename(target, path)  # back under its old id, with its old meta
            raise
        return info

    def set_transcript(self, voice_id: str, transcript: str, *, source: str = "user",
                       confidence: float | None = None) -> VoiceInfo:
        """Replace a saved voice's transcript (``source``: "user" or "asr", see :class:`VoiceInfo`);
        the transcript file is written before the record that describes it."""
        transcript = _check_transcript(transcript)
        source, confidence = _transcript_origin(transcript, source, confidence)
        with self._meta_lock:
            path = self._existing(voice_id)
            info = replace(self._read_meta(path), transcript_source=source, transcript_confidence=confidence)
            write_atomic(path / TRANSCRIPT_NAME, transcript.encode("utf-8"))
            write_atomic(path / META_NAME, _meta_bytes(info))
        logger.info("voice %s: transcript set (%s)", voice_id, source or "none")
        return info

    def record_encoding(self, voice_id: str, engine: str, model_id: str, sounds: str | None = None) -> str | None:
        """Add ``engine/model_id`` to the voice's ``encoded_for`` and, given, what it ``sounds`` like
        there (no write when both are recorded). Returns what it sounded like there before when that
        differs: the name recorded earlier, or EARLIER_ENCODING when it was encoded there without a
        name recorded (by an older version); None otherwise."""
        model = f"{engine}/{model_id}"
        with self._meta_lock:  # two jobs on the same voice must not drop each other's model
            path = self._existing(voice_id)
            info = self._read_meta(path)
            known = dict(info.sounds)
            before = known.get(model, EARLIER_ENCODING if model in info.encoded_for else None)
            if model in info.encoded_for and (sounds is None or known.get(model) == sounds):
                return None
            if sounds is not None:
                known[model] = sounds
            encoded_for = info.encoded_for if model in info.encoded_for else (*info.encoded_for, model)
            write_atomic(path / META_NAME, _meta_bytes(replace(info, encoded_for=encoded_for,
                                                               sounds=tuple(sorted(known.items())))))
            return before if sounds is not None and before is not None and before != sounds else None

    def _id_for(self, display: str, voice_id: str) -> str:
        """``voice_id``, or the first free ``voice_id-2``, ``-3``... when a voice with another name
        holds it (汪老师 and 王老师 are both wang-lao-shi); NameError_ when that voice has this very
        name (letter case and spaces aside)."""
        def same(a: str, b: str) -> bool:
            return " ".join(a.casefold().split()) == " ".join(b.casefold().split())

        candidate = voice_id
        for number in range(2, 100):
            path = self._path(candidate)
            if not path.exists():
                return candidate
            try:
                held_by = self._read_meta(path).name
            except (OSError, ValueError, KeyError, TypeError):
                held_by = display  # unreadable: never take its place
            if same(held_by, display):
                raise NameError_(f"a saved voice named {held_by!r} (id {candidate!r}) already exists; "
                                 "choose another name", code="voice_name_taken", name=held_by,
                                 voice_id=candidate)
            candidate = f"{voice_id}-{number}"[:64]
        raise NameError_(f"too many saved voices with names like {display!r}; choose another name",
                         code="voice_names_exhausted", name=display)

    def delete(self, voice_id: str) -> None:
        with self._meta_lock:  # not under a meta write in flight (a transcript heard, an encoding recorded)
            shutil.rmtree(self._existing(voice_id))
        logger.info("deleted voice %s", voice_id)

    def export(self, voice_id: str) -> bytes:
        """One zip: voice.wav + transcript.txt + meta.json."""
        path = self._existing(voice_id)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for member in (WAV_NAME, TRANSCRIPT_NAME, META_NAME):
                zf.write(path / member, arcname=member)
        return buf.getvalue()

    def import_zip(self, data: bytes, *, max_bytes: int, name: str | None = None,
                   overwrite: bool = False, presets: Iterable[str] = ()) -> VoiceInfo:
        """Validate an exported voice completely (members, sizes, meta, name, transcript, audio),
        then save it. Nothing is written unless everything is valid; the name it is saved under
        (``name`` or the zip's own) must not be one of ``presets``."""
        if len(data) > max_bytes:
            raise PayloadTooLargeError(f"the voice file is {len(data) / 1e6:.1f} MB; the limit is "
                                       f"{max_bytes / 1e6:.1f} MB", code="voice_file_too_large",
                                       size_mb=len(data) / 1e6, limit_mb=max_bytes / 1e6)
        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
        except _ZIP_ERRORS:
            raise InputError("not a voice file: expected a .zip exported by cosyedge",
                             code="voice_file_not_zip") from None
        with zf:
            members = {info.filename: info for info in zf.infolist()}
            expected = {WAV_NAME, TRANSCRIPT_NAME, META_NAME}
            if set(members) != expected:
                raise InputError(f"not a voice file: it must hold exactly {', '.join(sorted(expected))}; "
                                 f"found {', '.join(sorted(members)) or 'nothing'}",
                                 code="voice_file_members")
            limits = {WAV_NAME: max_bytes, TRANSCRIPT_NAME: 4 * MAX_TRANSCRIPT_CHARS,
                      META_NAME: _MAX_META_BYTES}
            for member, limit in limits.items():
                if members[member].file_size > limit:
                    raise PayloadTooLargeError(f"{member} in the voice file is too large "
                                               f"({members[member].file_size} bytes; limit {limit})",
                                               code="voice_file_member_too_large", member=member,
                                               size=members[member].file_size, limit=limit)
            try:
                blobs = {m: zf.read(m) for m in expected}
            except _ZIP_ERRORS as exc:
                raise InputError(f"the voice file is damaged: {exc}", code="voice_file_damaged") from None
        meta = _parse_meta(blobs[META_NAME])
        try:
            transcript = blobs[TRANSCRIPT_NAME].decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("the voice file's transcript is not UTF-8 text",
                             code="voice_file_transcript_not_utf8") from None
        transcript = _check_transcript(transcript)
        display, _ = name_to_id(name if name is not None else meta["name"])
        refuse_preset_name(display, presets)
        prompt = condition_prompt(blobs[WAV_NAME], max_bytes=max_bytes, filename=WAV_NAME)
        source, confidence = _meta_transcript_origin(meta)
        return self.save(display, prompt, transcript, engine=meta["engine"], model_id=meta["model_id"],
                         consent=ConsentRecord.from_meta(meta.get("consent")), overwrite=overwrite,
                         transcript_source=source, transcript_confidence=confidence)

    @staticmethod
    def _read_meta(path: Path) -> VoiceInfo:
        meta = json.loads((path / META_NAME).read_text(encoding="utf-8"))
        return VoiceInfo(id=path.name, name=str(meta["name"]), engine=str(meta["engine"]),
                         model_id=str(meta["model_id"]), duration_s=float(meta["duration_s"]),
                         created=float(meta["created"]), notes=tuple(meta.get("notes", ())),
                         consent=ConsentRecord.from_meta(meta.get("consent")),
                         encoded_for=tuple(str(m) for m in meta.get("encoded_for", ())),
                         sounds=_meta_sounds(meta.get("sounds")),
                         **dict(zip(("transcript_source", "transcript_confidence"),
                                    _meta_transcript_origin(meta))))


def _meta_sounds(value: Any) -> tuple[tuple[str, str], ...]:
    """``sounds`` from a meta.json: absent (older voices) or malformed reads as none recorded."""
    if not isinstance(value, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in value.items() if isinstance(v, str)))


def _float_wav(prompt: ConditionedPrompt) -> bytes:
    """32-bit float WAV: the saved samples are bit-identical to the conditioned ones, so a voice saved
    from an upload hits the prompt cache entry that upload already made."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, prompt.pcm, prompt.sample_rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def _meta_bytes(info: VoiceInfo) -> bytes:
    meta = {"format": LIBRARY_FORMAT, **asdict(info), "notes": list(info.notes),
            "consent": info.consent.to_meta() if info.consent is not None else None,
            "encoded_for": list(info.encoded_for), "sounds": dict(info.sounds)}
    return json.dumps(meta, ensure_ascii=False, indent=2).encode("utf-8")


def _parse_meta(blob: bytes) -> dict[str, Any]:
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


def _check_transcript(transcript: str | None) -> str:
    transcript = (transcript or "").strip()
    if len(transcript) > MAX_TRANSCRIPT_CHARS:
        raise InputError(f"the transcript is {len(transcript)} characters; at most {MAX_TRANSCRIPT_CHARS}",
                         code="transcript_too_long", length=len(transcript), limit=MAX_TRANSCRIPT_CHARS)
    if "\x00" in transcript:
        raise InputError("the transcript contains a NUL character", code="transcript_nul")
    return transcript


TRANSCRIPT_SOURCES = ("user", "asr")


def _transcript_origin(transcript: str, source: str | None,
                       confidence: float | None) -> tuple[str | None, float | None]:
    """(source, confidence) as stored: none for an empty transcript, "user" unless it was heard."""
    if not transcript:
        return None, None
    if source == "asr":
        return "asr", None if confidence is None else round(float(confidence), 4)
    return "user", None


def _meta_transcript_origin(meta: dict[str, Any]) -> tuple[str | None, float | None]:
    """The transcript's source and confidence from a meta.json; anything unknown counts as typed
    (voices saved before sources were recorded had typed transcripts)."""
    source = meta.get("transcript_source", "user")
    confidence = meta.get("transcript_confidence")
    if source is None:  # saved without a transcript
        return None, None
    if source not in TRANSCRIPT_SOURCES:
        source = "user"
    if source != "asr" or isinstance(confidence, bool) or not isinstance(confidence, (int, float)) \
            or not 0.0 <= float(confidence) <= 1.0:
        confidence = None
    return source, None if confidence is None else float(confidence)
