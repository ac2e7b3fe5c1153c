"""Speech tokens -> 24 kHz audio: flow matching then HiFT, onnxruntime + numpy only (no torch).

    t2w = Token2Wav.load("models/cosyvoice2-int8", threads=2)
    audio = t2w(tokens, prompt_tokens, prompt_mel, speaker_embedding, speed=1.0)

``prompt_mel`` is the prompt's 80-bin flow mel, frames first ([2 x prompt tokens, 80], see
:func:`cosyedge.engines.cosyvoice.features.prompt_mel`); ``speaker_embedding`` is campplus's [192] output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosyedge.engines.cosyvoice.flow import FlowDecoder, FlowParams, resample_mel
from cosyedge.engines.cosyvoice.hift import HiftParams, HiftVocoder
from cosyedge.engines.cosyvoice.manifest import ModelDir
from cosyedge.errors import ParameterError

logger = logging.getLogger(__name__)

SPEED_RANGE = (0.5, 2.0)


@dataclass
class Token2Wav:
    """The flow decoder and the vocoder of one model directory."""

    flow: FlowDecoder
    vocoder: HiftVocoder

    @classmethod
    def load(cls, model_dir: Path | str | ModelDir, threads: int = 0, verify_hashes: bool = False) -> "Token2Wav":
        """Open the four graphs and side files listed in ``manifest.json`` (CPU, ``threads`` intra-op)."""
        model = model_dir if isinstance(model_dir, ModelDir) else ModelDir.load(model_dir, verify_hashes)
        fc, hc = model.config("flow"), model.config("hift")
        flow = FlowDecoder(model.session(fc["encoder"], threads), model.session(fc["estimator"], threads),
                           np.load(model.file(fc["noise"])), FlowParams.from_dict(fc))
        with np.load(model.file(hc["source"])) as source:
            weight, bias = source["weight"], source["bias"]
        vocoder = HiftVocoder(model.session(hc["f0"], threads), model.session(hc["decoder"], threads),
                              weight, bias, HiftParams.from_dict(hc))
        return cls(flow, vocoder)

    @property
    def sample_rate(self) -> int:
        return self.vocoder.params.sampling_rate

    def mel(self, tokens, prompt_tokens, prompt_mel, speaker_embedding, speed: float = 1.0,
            n_timesteps: int | None = None) -> np.ndarray:
        """The mel [80, frames] that :meth:`__call__` vocodes (after the speed change)."""
        speed = float(speed)
        if not (SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]):
            raise ParameterError(f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}")
        mel = self.flow(tokens, prompt_tokens, prompt_mel, speaker_embedding, n_timesteps)
        return resample_mel(mel, speed) if speed != 1.0 else mel

    def __call__(self, tokens, prompt_tokens, prompt_mel, speaker_embedding, speed: float = 1.0,
                 n_timesteps: int | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
        """float32 audio at :attr:`sample_rate`, 480 samples per mel frame, within +-0.99."""
        mel = self.mel(tokens, prompt_tokens, prompt_mel, speaker_embedding, speed, n_timesteps)
        return self.vocoder(mel, rng=rng)
