"""A small engine implementing the Engine protocol for web/service tests: one sine tone per sentence.

``delay`` slows each sentence on purpose (load and cancel tests); ``active``/``peak`` count how
many syntheses run at once, so a test can prove the queue's limit; ``analyses`` counts the text
passes (``analyze``, also the one ``synthesize`` makes when handed raw text).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Iterator

import numpy as np

from cosyedge.engines.base import (AudioChunk, Capabilities, CancelFn, ProgressFn, StepFn, SynthesisOptions,
                                   TextAnalysis, VoicePrompt)
from cosyedge.engines.cosyvoice.common.instruct_format import format_instruction
from cosyedge.errors import CancelledError
from cosyedge.text import langid

SAMPLE_RATE = 24000
PRESETS = ["female_1", "female_2", "male_1", "male_2", "child"]
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


class FakeEngine:
    """Sine tones: 0.1 s + 0.01 s per character at the speed given, one chunk per sentence."""

    name = "fake"
    model_id = "fake-sine"

    def __init__(self, delay: float = 0.0, ballast_mb: int = 0, native_clone: bool = False,
                 native_instruct: bool = False, encode_delay: float = 0.0,
                 languages: tuple[str, ...] = ("auto", "zh", "en", "ja"),
                 quality_modes: tuple[str, ...] = ()) -> None:
        self.capabilities = Capabilities(native_clone=native_clone, native_instruct=native_instruct,
                                         languages=languages,
                                         sample_rate=SAMPLE_RATE, quality_modes=quality_modes)
        self.delay = delay
        self.encode_delay = encode_delay
        # Memory the engine "holds" (like ONNX weights), so unload tests can watch RSS fall.
        self.ballast = np.ones(ballast_mb * 1024 * 1024 // 8, dtype=np.float64) if ballast_mb else None
        self.closed = False
        self.calls: list[tuple[str, object, SynthesisOptions]] = []
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.sentences_done = 0
        self.analyses = 0

    def presets(self) -> list[str]:
        return list(PRESETS)

    def format_instruction(self, instruction: str) -> str:
        """As CosyVoice 2 reads it (asked for when ``native_instruct``)."""
        return format_instruction(instruction, 2)

    #: The steps an encoding says (like CosyVoice's, once its encoders are open), when it takes time.
    ENCODE_STEPS = ("tokens", "mel", "speaker")

    def prompt_steps(self) -> int:
        return len(self.ENCODE_STEPS) if self.encode_delay else 0

    def encode_prompt(self, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                      cancelled: CancelFn | None = None, step: StepFn | None = None) -> VoicePrompt:
        """Takes ``encode_delay`` seconds in 0.05 s ticks, in ``ENCODE_STEPS`` equal steps said as each
        starts, stopping when ``cancelled()``."""
        total = len(self.ENCODE_STEPS)
        ticks = int(self.encode_delay / 0.05 / total)
        for number, stage in enumerate(self.ENCODE_STEPS if self.encode_delay else (), start=1):
            if step is not None:
                step(number, total, stage)
            for _ in range(ticks):
                if cancelled is not None and cancelled():
                    raise CancelledError("cancelled while preparing the voice")
                time.sleep(0.05)
        return VoicePrompt(engine=self.name, model_id=self.model_id,
                           arrays={"mean": np.array([float(np.mean(audio))], dtype=np.float32)},
                           meta={"transcript": transcript, "sample_rate": sample_rate})

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        """Sentences split at end punctuation; what is skipped and the language notes come from the
        shared text rules (cosyedge.text.langid), as on the Kokoro engine."""
        with self._lock:
            self.analyses += 1
        unread, unapplied = langid.Unread(), langid.Unapplied(language)
        langid.segment(text, language, "zh", unread, unapplied)
        return TextAnalysis(text=text, language=language, sentences=tuple(split_sentences(text) or [text]),
                            skipped=tuple(unread.notes()), notes=tuple(unapplied.notes()))

    def synthesize(self, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
                   progress: ProgressFn | None = None,
                   cancelled: CancelFn | None = None) -> Iterator[AudioChunk]:
        analysis = text if isinstance(text, TextAnalysis) else self.analyze(text, options.language)
        self.calls.append((analysis.text, voice, options))
        sentences = analysis.sentences
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            for index, sentence in enumerate(sentences):
                if cancelled is not None and cancelled():
                    raise CancelledError(f"cancelled before sentence {index + 1}")
                if self.delay:
                    time.sleep(self.delay)
                seconds = (0.1 + 0.01 * len(sentence)) / options.speed
                t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
                audio = 0.3 * np.sin(2 * np.pi * (220 + 20 * index) * t).astype(np.float32)
                with self._lock:
                    self.sentences_done += 1
                if progress is not None:
                    progress(index + 1, len(sentences))
                yield AudioChunk(audio=audio, sample_rate=SAMPLE_RATE, text=sentence, index=index,
                                 total=len(sentences))
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        self.closed = True
        self.ballast = None


class FakeFactory:
    """An engine factory that counts loads and keeps the last engine for inspection."""

    def __init__(self, **engine_kwargs: object) -> None:
        self.engine_kwargs = engine_kwargs
        self.loads = 0
        self.engine: FakeEngine | None = None
        self.load_delay = 0.0

    def __call__(self) -> FakeEngine:
        if self.load_delay:
            time.sleep(self.load_delay)
        self.loads += 1
        self.engine = FakeEngine(**self.engine_kwargs)  # type: ignore[arg-type]
        return self.engine
