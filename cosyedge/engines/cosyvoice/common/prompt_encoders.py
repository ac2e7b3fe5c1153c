"""Prompt audio -> what CosyVoice2 conditions on: speaker embedding, speech tokens and flow mel.

* speaker embedding: ``campplus.onnx`` on the mean-removed 80-bin Kaldi fbank of the 16 kHz audio
  (``[1, frames, 80]`` -> ``[1, 192]``);
* prompt speech tokens: ``speech_tokenizer_v2.onnx`` on the 128-bin Whisper log-mel of the 16 kHz audio
  (``[1, 128, frames]`` + length -> 25 tokens per second); prompts longer than 30 s are refused, as
  upstream does;
* prompt mel: the flow's 80-bin mel of the 24 kHz audio (2 frames per token), cut so that
  ``frames == 2 * tokens`` (upstream's alignment rule for CosyVoice2).
Both ONNX graphs are upstream's own files, fed by input position exactly as upstream feeds them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from typing import Callable

import numpy as np

from cosyedge.engines.cosyvoice.common.whisper_mel import log_mel_spectrogram
from cosyedge.errors import AudioError

logger = logging.getLogger(__name__)

TOKENIZER_RATE = 16000
MAX_PROMPT_SECONDS = 30.0
MIN_PROMPT_SECONDS = 0.5


def resample(audio: np.ndarray, sample_rate: int, target: int) -> np.ndarray:
    """Mono float32 at ``target`` Hz (soxr, high quality)."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if sample_rate == target:
        return audio
    import soxr

    return soxr.resample(audio, sample_rate, target, quality="HQ").astype(np.float32)


@dataclass
class EncodedPrompt:
    """The prompt-derived arrays, aligned: ``len(mel) == 2 * len(tokens)``."""

    embedding: np.ndarray   # [192] float32
    tokens: np.ndarray      # [n] int64 speech tokens
    mel: np.ndarray         # [2n, 80] float32 flow mel


class CampplusJudge:
    """The model's own speaker encoder as a judge of finished audio (the speed-mode check compares
    a mode's output with exact's through it): mono audio at any rate -> campplus embedding [192]."""

    def __init__(self, campplus) -> None:
        self.campplus = campplus

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        from cosyedge.engines.cosyvoice.common.features import campplus_features

        wav16k = resample(audio, sample_rate, TOKENIZER_RATE)
        if wav16k.size < TOKENIZER_RATE // 10:  # fbank needs whole 25 ms frames; a silent render is short
            wav16k = np.pad(wav16k, (0, TOKENIZER_RATE // 10 - wav16k.size))
        feats = campplus_features(wav16k)[None].astype(np.float32)
        name = self.campplus.get_inputs()[0].name
        return np.asarray(self.campplus.run(None, {name: feats})[0], dtype=np.float32).reshape(-1)


class PromptEncoder:
    """campplus + speech tokenizer sessions and the flow-mel settings of one model directory."""

    def __init__(self, campplus, speech_tokenizer, mel_settings: dict | None, flow_rate: int = 24000,
                 mel_per_token: int | None = 2) -> None:
        # CosyVoice2 cuts the prompt to exactly 2 mel frames per token; CosyVoice-300M (None) keeps both
        # whole: its length regulator stretches the prompt tokens to the prompt mel's frames.
        self.mel_per_token = mel_per_token
        self.campplus = campplus
        self.speech_tokenizer = speech_tokenizer
        self.mel_settings = dict(mel_settings or {})
        self.flow_rate = int(self.mel_settings.get("sample_rate", flow_rate))

    def speaker_embedding(self, wav16k: np.ndarray) -> np.ndarray:
        from cosyedge.engines.cosyvoice.common.features import campplus_features

        feats = campplus_features(wav16k)[None].astype(np.float32)
        name = self.campplus.get_inputs()[0].name
        return np.asarray(self.campplus.run(None, {name: feats})[0], dtype=np.float32).reshape(-1)

    def speech_tokens(self, wav16k: np.ndarray) -> np.ndarray:
        seconds = wav16k.size / TOKENIZER_RATE
        if seconds > MAX_PROMPT_SECONDS:
            raise AudioError(f"prompt audio is {seconds:.1f} s; CosyVoice's speech tokenizer takes at most "
                             f"{MAX_PROMPT_SECONDS:.0f} s (3-10 s works best)")
        mel = log_mel_spectrogram(wav16k)[None]
        inputs = self.speech_tokenizer.get_inputs()
        out = self.speech_tokenizer.run(None, {inputs[0].name: mel,
                                               inputs[1].name: np.array([mel.shape[2]], dtype=np.int32)})
        return np.asarray(out[0]).reshape(-1).astype(np.int64)

    def flow_mel(self, wav: np.ndarray) -> np.ndarray:
        from cosyedge.engines.cosyvoice.common.features import prompt_mel

        return prompt_mel(wav, self.mel_settings)

    #: The steps of :meth:`encode`, in order, as it says them (``stage`` codes of ``StepFn``).
    STEPS = ("tokens", "mel", "speaker")

    def encode(self, audio: np.ndarray, sample_rate: int,
               step: Callable[[str], None] | None = None) -> EncodedPrompt:
        """All three parts from mono audio at any rate; raises :class:`AudioError` on unusable audio.
        ``step(stage)`` hears each of :data:`STEPS` as it starts."""
        say = step or (lambda _: None)
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if sample_rate <= 0:
            raise AudioError(f"sample rate {sample_rate} is not valid")
        if not np.isfinite(audio).all():
            raise AudioError("prompt audio contains NaN or infinite samples")
        if audio.size < MIN_PROMPT_SECONDS * sample_rate:
            raise AudioError(f"prompt audio is {audio.size / sample_rate:.2f} s; give at least "
                             f"{MIN_PROMPT_SECONDS} s (3-10 s works best)")
        wav16k = resample(audio, sample_rate, TOKENIZER_RATE)
        say("tokens")
        tokens = self.speech_tokens(wav16k)
        say("mel")
        mel = self.flow_mel(resample(audio, sample_rate, self.flow_rate))
        ratio = self.mel_per_token
        n = min(mel.shape[0] // ratio, tokens.size) if ratio else tokens.size
        if n == 0:
            raise AudioError("prompt audio gave no speech tokens; give a longer recording")
        say("speaker")
        embedding = self.speaker_embedding(wav16k)
        mel = mel[:ratio * n] if ratio else mel
        return EncodedPrompt(embedding=embedding, tokens=tokens[:n], mel=np.ascontiguousarray(mel))
