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
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from cosyedge.audio import ConditionedPrompt, condition_prompt
from cosyedge.voices.consent import ConsentRecord
from cosyedge.engines.base import VoicePrompt
from cosyedge.errors import (ConflictError, InputError, NameError_, NotFoundError,
                             StorageFullError)
from cosyedge.files import write_atomic
from cosyedge.voices import voice_file
from cosyedge.voices.voice_file import (LIBRARY_FORMAT, MAX_TRANSCRIPT_CHARS, META_NAME, TRANSCRIPT_NAME,
                                        WAV_NAME, VoiceFile)

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

    def find(self, prompt: ConditionedPrompt, transcript: str | None, engine: str, model_id: str) -> VoicePrompt | None:
        """The entry stored for this prompt, key transcript (as :func:`key_transcript` gave it),
        engine and model, without encoding anything: what an export carries."""
        return self._load(prompt_key(prompt.pcm_bytes(), transcript, engine, model_id), engine, model_id)

    def put(self, prompt: ConditionedPrompt, transcript: str | None, encoded: VoicePrompt) -> None:
        """Store an encoding made elsewhere (an imported voice's) under the key this box's own
        encoding of the prompt would have: the same key rule, so the prompt's next use reads it."""
        self._store(prompt_key(prompt.pcm_bytes(), transcript, encoded.engine, encoded.model_id),
                    encoded.to_bytes())

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
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
#: The runs :func:`id_from_name` reads: Latin letters, digits and '._-' together; Chinese together.
_ID_RUN_RE = re.compile(r"[A-Za-z0-9._-]+|[\u3400-\u4dbf\u4e00-\u9fff]+")
#: What :meth:`VoiceLibrary.record_encoding` says a voice sounded like on a model it was encoded for
#: before its sound was recorded.
EARLIER_ENCODING = "an earlier encoding"


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
    """Validate a voice name; return (display name, the id :func:`id_from_name` makes of it). Raises
    NameError_ naming the problem.

    Allowed: ``^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$``, or a name of at most 32 characters with Chinese
    characters in it (Latin letters, digits, spaces, '.', '_' and '-' beside them).
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
    if not (NAME_RE.match(name) or (_CJK_NAME_RE.match(name) and _CJK_RE.search(name))):
        raise NameError_(f"the voice name {name!r} is not allowed: use letters, digits, spaces, '.', '_' "
                         "or '-', starting with a letter or digit (or a Chinese name of up to 32 characters)",
                         code="voice_name_not_allowed", name=name)
    voice_id = id_from_name(name)
    if not ID_RE.match(voice_id):
        raise NameError_(f"the voice name {name!r} does not give a usable id",
                         code="voice_name_no_id", name=name)
    return name, voice_id


def id_from_name(name: str) -> str:
    """The one rule that makes a voice's id of its name, once, when it is saved: a rename keeps the
    id, and an id on disk is never changed. Latin letters and digits are lower-cased and kept with
    '.', '_' and '-'; each Chinese character becomes its pinyin syllable (read in its word, so a
    polyphone gets its reading there); every other run of characters (spaces) and every seam
    between Latin and Chinese becomes one '-'; no '-', '.' or '_' at either end; at most 64
    characters. "Ms Wang" -> ms-wang, "王老师" -> wang-lao-shi, "Ms Wang 王老师" ->
    ms-wang-wang-lao-shi. A voice with another name already holding the id gets ``-2``, ``-3``...
    (:meth:`VoiceLibrary.save`)."""
    parts: list[str] = []
    for run in _ID_RUN_RE.findall(unicodedata.normalize("NFC", name)):
        if _CJK_RE.match(run):
            from pypinyin import lazy_pinyin

            parts += [re.sub(r"[^a-z0-9]", "", syllable.lower()) for syllable in lazy_pinyin(run)]
        else:
            parts.append(run.lower())
    return re.sub(r"-{2,}", "-", "-".join(part for part in parts if part))[:64].strip("-._")


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


@dataclass(frozen=True)
class LibraryUsage:
    """How full the library is, against its bounds (0: none)."""

    voices: int
    bytes: int
    max_voices: int
    max_bytes: int

    @property
    def room(self) -> int | None:
        """About how many more voices fit (by count and by the mean size so far); None: no bound."""
        left = []
        if self.max_voices:
            left.append(max(0, self.max_voices - self.voices))
        if self.max_bytes:
            mean = self.bytes / self.voices if self.voices else 1_000_000
            left.append(max(0, int((self.max_bytes - self.bytes) // max(mean, 1))))
        return min(left) if left else None

    def as_dict(self) -> dict[str, Any]:
        return {"voices": self.voices, "max_voices": self.max_voices or None,
                "mb": round(self.bytes / 1e6, 1), "max_mb": round(self.max_bytes / 1e6, 1) or None,
                "room": self.room}


class VoiceLibrary:
    """Saved voices under one root folder; see the module doc for the layout and the rules.

    ``max_voices`` / ``max_bytes`` bound what new saves and imports may add (0: no bound): past
    either, they are refused (``voice_library_full``) and nothing saved is removed to make room. A
    library already over a new bound lists, loads, renames and deletes as ever."""

    def __init__(self, directory: Path, max_voices: int = 0, max_bytes: int = 0) -> None:
        self.directory = Path(directory)
        self.max_voices = max_voices
        self.max_bytes = max_bytes
        self._meta_lock = threading.Lock()
        self._save_lock = threading.Lock()  # a save's room check and its write, one save at a time
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

    def usage(self) -> LibraryUsage:
        """The voices saved and the bytes their folders hold, with the bounds."""
        voices, size = 0, 0
        if self.directory.is_dir():
            for path in self.directory.iterdir():
                if path.is_dir() and not path.is_symlink() and ID_RE.match(path.name):
                    voices += 1
                    size += _folder_bytes(path)
        return LibraryUsage(voices, size, self.max_voices, self.max_bytes)

    def _check_room(self, adding: int, replacing: str | None) -> None:
        """StorageFullError (``voice_library_full``) when ``adding`` bytes (one voice more, or
        ``replacing`` that voice) would pass a bound."""
        if not (self.max_voices or self.max_bytes):
            return
        usage = self.usage()
        voices, size = usage.voices, usage.bytes
        if replacing is not None and (self.directory / replacing).is_dir():
            size -= _folder_bytes(self.directory / replacing)
        else:
            voices += 1
        if (self.max_voices and voices > self.max_voices) or (self.max_bytes and size + adding > self.max_bytes):
            raise StorageFullError(
                f"the voice library is full: {usage.voices} of {self.max_voices or 'any number of'} voices, "
                f"{usage.bytes / 1e6:.1f} of {self.max_bytes / 1e6:.0f} MB, and this one needs "
                f"{adding / 1e6:.1f} MB; nothing saved is removed to make room: delete a voice no longer "
                "needed (COSYEDGE_VOICE_LIBRARY_MAX_VOICES / _MAX_MB set the bound)",
                code="voice_library_full", voices=usage.voices, max_voices=self.max_voices,
                used_mb=round(usage.bytes / 1e6, 1), max_mb=round(self.max_bytes / 1e6, 1),
                needed_mb=round(adding / 1e6, 1))

    def save(self, name: str, prompt: ConditionedPrompt, transcript: str | None, *, engine: str,
             model_id: str, consent: ConsentRecord | None = None, overwrite: bool = False,
             voice_id: str | None = None, transcript_source: str | None = None,
             transcript_confidence: float | None = None) -> VoiceInfo:
        """Save a conditioned prompt as a named voice (atomically: all three files or nothing).

        The id is made of the name (:func:`id_from_name`, numbered when another voice holds it) unless
        ``voice_id`` gives it (an import keeps the id it had); ``overwrite`` replaces the voice of that
        id, or of that name. A name another voice has is refused, and so is a save past the library's
        bounds. ``consent``: the record of :func:`cosyedge.voices.consent.require_consent` (None: not
        recorded, as for a voice saved before consent was asked for; the service always passes one).
        ``transcript_source``: see :class:`VoiceInfo` (default: "user" when there is a transcript)."""
        display, rule_id = name_to_id(name)
        transcript = _check_transcript(transcript)
        source, confidence = _transcript_origin(transcript, transcript_source, transcript_confidence)
        with self._save_lock:
            if voice_id is not None:
                self._path(voice_id)  # a valid id, or NameError_
            if overwrite:
                voice_id = voice_id or self._id_named(display) or rule_id
                self._refuse_taken_name(display, except_id=voice_id)
            elif voice_id is None:
                voice_id = self._id_for(display, rule_id)
            elif not self.free_id(voice_id):
                raise NameError_(f"a saved voice with id {voice_id!r} already exists", code="voice_id_taken",
                                 voice_id=voice_id)
            else:
                self._refuse_taken_name(display)
            target = self._path(voice_id)
            info = VoiceInfo(id=voice_id, name=display, engine=engine, model_id=model_id,
                             duration_s=round(prompt.duration_s, 3), created=time.time(),
                             notes=tuple(prompt.notes), consent=consent, transcript_source=source,
                             transcript_confidence=confidence)
            files = {WAV_NAME: _float_wav(prompt), TRANSCRIPT_NAME: transcript.encode("utf-8"),
                     META_NAME: _meta_bytes(info)}
            self._check_room(sum(map(len, files.values())), voice_id if overwrite else None)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self._root()))
            try:
                for member, data in files.items():
                    write_atomic(tmp / member, data)
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

    def _id_named(self, display: str) -> str | None:
        """The id of the voice named ``display`` (letter case and spaces aside), if there is one."""
        folded = " ".join(display.casefold().split())
        return next((v.id for v in self.list() if " ".join(v.name.casefold().split()) == folded), None)

    def rename(self, voice_id: str, new_name: str, *, presets: Iterable[str] = ()) -> VoiceInfo:
        """Give a voice another name; its id stays (REST, OpenAI and Wyoming references keep
        resolving). A name another voice has, or one of ``presets``, is refused."""
        with self._meta_lock:
            path = self._existing(voice_id)
            display, _ = name_to_id(new_name)
            refuse_preset_name(display, presets)
            self._refuse_taken_name(display, except_id=voice_id)
            info = replace(self._read_meta(path), name=display)
            write_atomic(path / META_NAME, _meta_bytes(info))
        logger.info("renamed voice %s to %r (its id stays)", voice_id, display)
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

    def _refuse_taken_name(self, display: str, except_id: str | None = None) -> None:
        """NameError_ when a voice other than ``except_id`` has this name (letter case and spaces aside)."""
        folded = " ".join(display.casefold().split())
        for voice in self.list():
            if voice.id != except_id and " ".join(voice.name.casefold().split()) == folded:
                raise NameError_(f"a saved voice named {voice.name!r} (id {voice.id!r}) already exists; "
                                 "choose another name", code="voice_name_taken", name=voice.name,
                                 voice_id=voice.id)

    def _id_for(self, display: str, voice_id: str) -> str:
        """``voice_id``, or the first free ``voice_id-2``, ``-3``... when another voice holds it
        (汪老师 and 王老师 are both wang-lao-shi); NameError_ when a voice has this very name."""
        self._refuse_taken_name(display)
        candidate = voice_id
        for number in range(2, 100):
            if not self._path(candidate).exists():
                return candidate
            candidate = f"{voice_id[:60]}-{number}"
        raise NameError_(f"too many saved voices with names like {display!r}; choose another name",
                         code="voice_names_exhausted", name=display)

    def free_id(self, voice_id: str) -> bool:
        """Whether no voice (nor anything else) holds ``voice_id``'s folder."""
        return not self._path(voice_id).exists()

    def delete(self, voice_id: str) -> None:
        with self._meta_lock:  # not under a meta write in flight (a transcript heard, an encoding recorded)
            shutil.rmtree(self._existing(voice_id))
        logger.info("deleted voice %s", voice_id)

    def export(self, voice_id: str, encodings: list[voice_file.Encoding] = ()) -> bytes:
        """One zip (:mod:`cosyedge.voices.voice_file`): voice.wav + transcript.txt + meta.json (with
        the voice's id), and the ``encodings`` given (:mod:`cosyedge.voices.exchange` finds them)."""
        path = self._existing(voice_id)
        return voice_file.write(*((path / m).read_bytes() for m in (WAV_NAME, TRANSCRIPT_NAME, META_NAME)),
                                encodings=encodings)

    def import_zip(self, data: bytes, *, max_bytes: int, name: str | None = None,
                   overwrite: bool = False, rename: bool = False, presets: Iterable[str] = ()) -> VoiceInfo:
        """Validate an exported voice completely (:func:`voice_file.read`: members, sizes, meta,
        transcript), then save it (:meth:`import_file`). Its encodings are not kept here: the
        prompt cache takes them (:func:`cosyedge.voices.exchange.import_voice`)."""
        return self.import_file(voice_file.read(data, max_bytes), max_bytes=max_bytes, name=name,
                                overwrite=overwrite, rename=rename, presets=presets)

    def import_file(self, parsed: VoiceFile, *, max_bytes: int, name: str | None = None,
                    overwrite: bool = False, rename: bool = False, presets: Iterable[str] = ()) -> VoiceInfo:
        """Save a voice file's voice under the id it had (:meth:`_import_id`: an id already here is
        refused unless ``rename`` or ``overwrite``), its transcript, audio and name checked first:
        nothing is written unless all is valid; the name it is saved under (``name`` or the file's
        own) must not be one of ``presets``."""
        meta = parsed.meta
        transcript = _check_transcript(parsed.transcript)
        display, _ = name_to_id(name if name is not None else meta["name"])
        refuse_preset_name(display, presets)
        prompt = condition_prompt(parsed.wav, max_bytes=max_bytes, filename=WAV_NAME)
        source, confidence = _meta_transcript_origin(meta)
        voice_id = self._import_id(meta, display, name, overwrite=overwrite, rename=rename)
        if rename and voice_id != _exported_id(meta) and name is None:
            display = self._copy_name(display)
        return self.save(display, prompt, transcript, engine=meta["engine"], model_id=meta["model_id"],
                         consent=ConsentRecord.from_meta(meta.get("consent")), overwrite=overwrite,
                         voice_id=voice_id, transcript_source=source, transcript_confidence=confidence)

    def _import_id(self, meta: dict[str, Any], display: str, name: str | None, *, overwrite: bool,
                   rename: bool) -> str | None:
        """The id an imported voice is saved under: the one it had (``meta["id"]``; an export of
        any version carries it, else the rule makes it of the exported name). Taken here: refused
        (``voice_exists``) unless ``overwrite`` (it replaces that voice) or ``rename`` (a copy: the
        id of ``name``, or of the exported name numbered, by the save's own rule: None)."""
        exported = _exported_id(meta)
        if overwrite or self.free_id(exported):
            return exported
        if not rename:
            holder = self.get(exported) if (self.directory / exported / META_NAME).is_file() else None
            held = f" ({holder.name})" if holder is not None else ""
            raise ConflictError(f"a saved voice with id {exported!r}{held} is already here: import this one as "
                                "a copy under another name (rename), or replace it (overwrite)",
                                code="voice_exists", voice_id=exported,
                                name=holder.name if holder is not None else exported)
        return None

    def _copy_name(self, display: str) -> str:
        """``display`` numbered ("Ms Lee 2", "Ms Lee 3"...) until no voice has that name."""
        for number in range(2, 100):
            candidate = f"{display[:60]} {number}"
            if self._id_named(candidate) is None:
                return candidate
        raise NameError_(f"too many saved voices with names like {display!r}; choose another name",
                         code="voice_names_exhausted", name=display)

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


def _exported_id(meta: dict[str, Any]) -> str:
    """The id a voice file's voice had: its ``id`` when that is a valid id, else the rule's of its name."""
    voice_id = meta.get("id")
    if isinstance(voice_id, str) and ID_RE.match(voice_id):
        return voice_id
    return name_to_id(meta["name"])[1]


def _folder_bytes(path: Path) -> int:
    """The bytes of the files directly in a voice's folder."""
    total = 0
    for member in path.iterdir():
        try:
            if member.is_file() and not member.is_symlink():
                total += member.stat().st_size
        except OSError:
            continue
    return total


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
