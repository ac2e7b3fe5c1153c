"""A stand-in for ``cosyedge.listening.asr.Recognizer``: hears a fixed text with a fixed confidence, counts calls,
and can hold a transcription until a test lets it go."""

from __future__ import annotations

import threading

import numpy as np

from cosyedge.listening.asr import Transcript


class FakeRecognizer:
    """``transcribe`` answers ``text`` with ``confidence``; ``calls`` holds (samples, rate, language);
    with ``gate`` set, each call first signals ``started`` and waits for the gate."""

    def __init__(self, text: str = "hello from the prompt", confidence: float = 0.9, language: str = "en",
                 gate: threading.Event | None = None, error: Exception | None = None) -> None:
        self.text = text
        self.confidence = confidence
        self.language = language
        self.gate = gate
        self.error = error
        self.started = threading.Event()
        self.calls: list[tuple[int, int, str | None]] = []
        self.releases = 0

    def transcribe(self, audio: np.ndarray, sample_rate: int, language: str | None = None,
                   beam_size: int = 5) -> Transcript:
        self.calls.append((int(np.asarray(audio).size), sample_rate, language))
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never let the transcription go"
        if self.error is not None:
            raise self.error
        return Transcript(text=self.text, language=language or self.language, language_probability=1.0,
                          confidence=self.confidence, no_speech_probability=0.01, seconds=0.0)

    def release(self) -> None:
        self.releases += 1
