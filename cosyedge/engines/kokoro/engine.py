"""KokoroEngine: the embedded engine (Kokoro-82M int8 ONNX), one sentence per model call.

Responsible for turning phoneme ids + a 256-d style vector into audio; language handling lives in
the frontend, voice packs in ``presets``, and the calls in flight (an engine-wide limit on runs at
once, chunks in order) in ``pipeline``. It cannot clone or follow instructions natively and its
Capabilities say so; ``encode_prompt`` delegates to the approximate voice match.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np

from cosyedge.config import Settings
from cosyedge.engines.base import (AudioChunk, CancelFn, Capabilities, ProgressFn, SynthesisOptions,
                                   TextAnalysis, VoicePrompt)
from cosyedge.engines.kokoro import adapt, crop, fused_runtime, model_files, presets
from cosyedge.engines.kokoro.pipeline import Call, Overlap, RunSlots, Ticket, in_order
from cosyedge.engines.kokoro.sessions import Session, make_session
from cosyedge.engines.kokoro.silence import trim_silence
from cosyedge.errors import EngineError, ModelMissingError, ParameterError
from cosyedge.catalog.manifest import manifest_identity, read_manifest, verify_files
from cosyedge.text import langid

logger = logging.getLogger(__name__)

MAX_PHONEMES = 510
WARM_UP_TEXT = "[zh]你好。[en]Hello. [ja]こんにちは。"
#: Silence after a call that was cut at a clause inside a sentence (the short first chunk). Each
#: chunk also keeps EDGE_PAD_S of its own near-silence at both ends, so the gap heard is this plus
#: 0.08 s. Measured inside one model call (docs/bench-log/kokoro.md): an English comma gives a 0.06-0.12 s
#: gap, a Chinese or Japanese comma ~0.43 s (longer than our 0.26 s sentence gap), so English gets
#: a short pause and zh/ja one a little below the sentence pause.
CLAUSE_PAUSE_S = {"en": 0.03, "zh": 0.15, "ja": 0.15}
#: Model runs at once, engine-wide (all jobs together), and so also one job's calls in flight, for
#: a session that leaves a core idle: the plain onnxruntime session at 2 threads does, and two runs
#: fill both cores ("Two sentences in flight" in docs/bench-log/kokoro.md); a third would add memory and
#: no core. ``load`` caps it at the session's thread count (the thermal governor's 1-thread setting
#: turns the overlap off) and uses 1 for a session that keeps all its threads busy by itself (the
#: fused runner: a second run beside it costs 9-14 % more CPU and 3-10 % more wall time, measured).
MAX_PARALLEL_RUNS = 2
#: A look-ahead call may start next to running ones only while their phonemes / speed together stay
#: within one longest call: the vocoder's activation memory grows with the audio, so two calls in
#: flight then peak about as high as one 510-phoneme call does (measured in docs/bench-log/kokoro.md).
LOOK_AHEAD_BUDGET = float(MAX_PHONEMES)
#: When a look-ahead call may start (measured in docs/bench-log/kokoro.md): never next to the first call,
#: whose chunk a listener waits for; after it, only while the audio already handed out covers twice
#: the next chunk's expected time alone (two runs on two cores each get at least half of them), so
#: the overlap cannot make a streaming player wait for the rest of a sentence cut at a clause.
DEFAULT_OVERLAP = Overlap(first=False, guard=2.0)


class Frontend(Protocol):
    """Text -> sentences of Kokoro phonemes (see ``frontend.KokoroFrontend``)."""

    def sentences(self, text: str, language: str = "auto") -> list[Any]: ...

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis: ...

    def token_ids(self, phonemes: str) -> list[int]: ...

    def close(self) -> None: ...


def _crop_checked(runner: dict) -> bool:
    """Whether setup checked the generator input crop with this code's version of it."""
    checked = runner.get("crop") or {}
    if checked and checked.get("version") != crop.CROP_VERSION:
        logger.warning("the generator input crop was checked by another version (%s, this is %s): rendering "
                       "whole calls; %s", checked.get("version"), crop.CROP_VERSION, model_files.FIX_HINT)
        return False
    return bool(checked)


def open_runtime(model_dir: Path, graph: dict, threads: int) -> Session:
    """The session for the manifest's ``runtime_graph``: the fused runner when setup checked it
    (``runner``, same version as this code; with the generator input crop when setup checked that
    too, ``runner["crop"]``), else the graph in one onnxruntime session. A cropped runner that fails
    to load falls back to the uncropped one, a fused runner to the plain session, with a warning."""
    path = Path(model_dir) / graph["file"]
    runner = graph.get("runner") or {}
    if runner.get("kind") == fused_runtime.RUNNER_KIND:
        if runner.get("version") != fused_runtime.RUNNER_VERSION:
            logger.warning("the fused runner was checked by another version (%s, this is %s): running %s as one "
                           "session; %s", runner.get("version"), fused_runtime.RUNNER_VERSION, path.name,
                           model_files.FIX_HINT)
        else:
            if _crop_checked(runner):
                try:
                    return fused_runtime.FusedSession(path, threads, crop=True)
                except Exception as exc:  # noqa: BLE001 - the uncropped runner computes the same speech
                    logger.warning("the generator input crop did not load (%s): rendering whole calls", exc)
            try:
                return fused_runtime.FusedSession(path, threads)
            except Exception as exc:  # noqa: BLE001 - the plain graph computes the same audio
                logger.warning("the fused runner did not load (%s): running %s as one onnxruntime session",
                               exc, path.name)
    return make_session(path, threads, graph.get("graph_optimization", "all"))


def call_cost(n_phonemes: int, speed: float) -> float:
    """A call's share of the look-ahead budget: its audio length (and so its activation memory)
    grows with the phonemes and shrinks with the speed."""
    return n_phonemes / speed if speed > 0 else float(n_phonemes)


@dataclass
class KokoroEngine:
    """Kokoro-82M behind the Engine protocol; build it with :meth:`load`."""

    session: Session
    packs: dict[str, np.ndarray]
    frontend: Frontend
    model_id: str = model_files.MODEL_ID
    name: str = "kokoro"
    capabilities: Capabilities = field(default_factory=lambda: Capabilities(
        native_clone=False, native_instruct=False, languages=presets.PACK_LANGUAGES,
        sample_rate=model_files.SAMPLE_RATE, preset_details=presets.preset_details()))
    parallel_runs: int = MAX_PARALLEL_RUNS
    overlap: Overlap = DEFAULT_OVERLAP
    look_ahead_budget: float = LOOK_AHEAD_BUDGET
    #: Run the listening check on every approximate match (seconds; off in tests of other things).
    check_reading: bool = True
    #: The listener of that check, ``transcribe(audio, sample_rate, language)``: the service hands
    #: its one recognizer's in (:meth:`listen_with`); without one the check is not run.
    transcribe: Callable[..., Any] | None = None
    runs: RunSlots = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.runs = RunSlots(self.parallel_runs, self.look_ahead_budget)

    @classmethod
    def load(cls, model_dir: Path, settings: Settings) -> "KokoroEngine":
        """Verify the model directory, open the ONNX session and the voice packs."""
        manifest = read_manifest(model_dir, model_files.FIX_HINT)
        # Size check only: hashing 92 MB on every load costs ~0.3 s; `selftest` hashes fully.
        verify_files(model_dir, manifest, model_files.FIX_HINT, hashes=False)
        graph = manifest.get("runtime_graph") or {"file": model_files.ONNX_NAME, "graph_optimization": "all"}
        if graph.get("file") not in manifest["files"]:
            raise ModelMissingError(f"model at {model_dir}: runtime graph {graph.get('file')!r} is not in "
                                    f"the manifest; {model_files.FIX_HINT}")
        from cosyedge.engines.kokoro.frontend import KokoroFrontend

        vocab = json.loads((Path(model_dir) / model_files.VOCAB_NAME).read_text(encoding="utf-8"))["vocab"]
        with np.load(Path(model_dir) / model_files.VOICES_NAME) as npz:
            packs = {k: npz[k].astype(np.float32) for k in npz.files}
        session = open_runtime(Path(model_dir), graph, settings.threads)
        frontend = KokoroFrontend(vocab)
        # Load jieba's dictionary, OpenJTalk, the espeak-ng worker and langdetect's profiles now
        # (~2 s), not in the first job.
        frontend.sentences(WARM_UP_TEXT)
        langid.load_detector()
        if getattr(session, "keeps_cores_busy", False):
            parallel_runs = 1
        else:
            parallel_runs = max(1, min(MAX_PARALLEL_RUNS, settings.threads))
        logger.info("loaded Kokoro %s from %s with %d threads, model runs at once: %d (%s)", graph["file"],
                    model_dir, settings.threads, parallel_runs, type(session).__name__)
        return cls(session=session, packs=packs, frontend=frontend,
                   model_id=manifest_identity(manifest, model_dir).model_id, parallel_runs=parallel_runs)

    def presets(self) -> list[str]:
        return presets.preset_names()

    def style_pack(self, voice: str | VoicePrompt, language: str | None = None) -> np.ndarray:
        """[510, 1, 256] style pack for a preset name (its recipe for ``language``, see ``presets``)
        or an encoded (approximate-match) prompt."""
        if isinstance(voice, VoicePrompt):
            if voice.engine != self.name or "style" not in voice.arrays:
                raise ParameterError(f"this voice was encoded for {voice.engine}/{voice.model_id}, "
                                     f"not for {self.name}; encode the prompt again")
            if voice.meta.get("preset_voice") in presets.PRESETS:  # the match kept a preset
                return presets.preset_pack(self.packs, voice.meta["preset_voice"], language)
            return voice.arrays["style"].astype(np.float32)
        return presets.preset_pack(self.packs, voice, language)

    def infer(self, token_ids: Sequence[int], pack: np.ndarray, speed: float) -> np.ndarray:
        """One model call: ids (≤ 510) + the pack row for that length -> float32 audio. It counts
        against the engine's run limit like a job's next sentence (voice match calls this)."""
        with self.runs.hold(Ticket(cost=call_cost(len(token_ids), speed), urgent=True)):
            return self._infer(token_ids, pack, speed)

    def _infer(self, token_ids: Sequence[int], pack: np.ndarray, speed: float) -> np.ndarray:
        """The model call itself; the caller holds a run slot."""
        if not token_ids:
            return np.zeros(0, dtype=np.float32)
        if len(token_ids) > MAX_PHONEMES:
            raise EngineError(f"sentence has {len(token_ids)} phonemes; the model takes at most {MAX_PHONEMES}")
        style = pack[min(len(token_ids), len(pack)) - 1].reshape(1, 256)
        feeds = {"tokens": np.array([[0, *token_ids, 0]], dtype=np.int64),
                 "style": np.ascontiguousarray(style, dtype=np.float32),
                 "speed": np.array([speed], dtype=np.float32)}
        audio = self.session.run(None, feeds)[0]
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        """The frontend's one pass: the sentences :meth:`synthesize` reads, what it will not read
        aloud (other languages' tags, unsupported scripts) and where the language setting was not
        applied (text read by its script's language)."""
        return self.frontend.analyze(text, language)

    def synthesize(self, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
                   progress: ProgressFn | None = None,
                   cancelled: CancelFn | None = None) -> Iterator[AudioChunk]:
        low, high = self.capabilities.speed_range
        if not low <= options.speed <= high:
            raise ParameterError(f"speed {options.speed} is out of range; use {low}-{high}")
        self.style_pack(voice)  # fail on an unknown voice before any work
        sentences = (text.sentences if isinstance(text, TextAnalysis)
                     else self.frontend.sentences(text, options.language))
        total = len(sentences)
        # A matched voice's formant/pitch-range adaptation (voice_match), applied to each chunk alike.
        adaptation = None
        if isinstance(voice, VoicePrompt):
            adaptation = adapt.Adaptation.from_meta(voice.meta.get("adaptation"))
        calls = []
        packs: dict[str, np.ndarray] = {}  # a preset may read each language with its own recipe
        for index, sentence in enumerate(sentences):
            language = getattr(sentence, "language", None) or "en"
            if language not in packs:
                packs[language] = self.style_pack(voice, language)
            pack = packs[language]
            ids = self.frontend.token_ids(sentence.phonemes)
            calls.append(Call(cost=call_cost(len(ids), options.speed),
                              run=partial(self._chunk, sentence, ids, index, total, pack, options.speed,
                                          adaptation)))
        for chunk in in_order(calls, self.runs, self.parallel_runs, self.overlap, cancelled):
            yield chunk
            if progress is not None:
                progress(chunk.index + 1, total)

    def _chunk(self, sentence: Any, ids: list[int], index: int, total: int, pack: np.ndarray,
               speed: float, adaptation: adapt.Adaptation | None = None) -> AudioChunk:
        """One sentence's call and its chunk (run by the pipeline, holding a run slot)."""
        audio = self._infer(ids, pack, speed)
        pause = None
        if not getattr(sentence, "ends_sentence", True):
            pause = CLAUSE_PAUSE_S.get(getattr(sentence, "language", "en"), CLAUSE_PAUSE_S["en"])
        sr = self.capabilities.sample_rate
        audio = adapt.apply(trim_silence(audio, sr), sr, adaptation)
        return AudioChunk(audio=np.clip(audio, -1.0, 1.0), sample_rate=sr,
                          text=sentence.text, index=index, total=total, pause_after_s=pause)

    def encode_prompt(self, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                      cancelled: CancelFn | None = None) -> VoicePrompt:
        """Approximate voice match (Kokoro cannot clone): pick/blend packs closest to the prompt;
        then, when ``check_reading``, the listening check of how clearly the match reads each language
        (``meta["reading_errors"]``: error rate per language; the service notes the bad ones)."""
        from cosyedge.engines.kokoro import voice_match

        prompt = voice_match.match_voice(self, audio, sample_rate, transcript, cancelled=cancelled)
        if self.check_reading:
            prompt.meta["reading_errors"] = self.reading_errors(prompt, cancelled)
            prompt = voice_match.guard_reading(self, prompt, cancelled)  # an adaptation that reads worse is dropped
        return prompt

    def voice_notes(self, voice: VoicePrompt) -> list[Any]:
        """Notes for a matched voice: its similarity at each stage of the match, and an adaptation
        not applied and why (:func:`voice_match.stage_notes`)."""
        from cosyedge.engines.kokoro import voice_match

        return voice_match.stage_notes(voice.meta)

    def listen_with(self, transcribe: Callable[..., Any] | None) -> None:
        """Hear the listening check with ``transcribe`` (the service's recognizer)."""
        self.transcribe = transcribe

    def reading_errors(self, voice: VoicePrompt | str, cancelled: CancelFn | None = None) -> dict[str, float]:
        """Error rate per language of ``voice`` on the guard lines (``cosyedge.listening.intelligibility``),
        heard by :attr:`transcribe`; {} when there is no listener or its model is not installed."""
        if self.transcribe is None:
            logger.info("matched voice not checked for intelligibility: no speech recognizer was given")
            return {}
        from cosyedge.engines.render import render
        from cosyedge.listening import intelligibility

        def speak(text: str, language: str) -> tuple[np.ndarray, int]:
            out = render(self, text, voice, SynthesisOptions(language=language))
            return out.audio, out.sample_rate

        try:
            return intelligibility.check_voice(speak, self.capabilities.languages, transcribe=self.transcribe,
                                               cancelled=cancelled)
        except ModelMissingError as exc:
            logger.warning("matched voice not checked for intelligibility: %s", exc)
            return {}

    def close(self) -> None:
        """Stop the frontend's helper process, close and drop the session (it frees its arena)."""
        self.frontend.close()
        close = getattr(self.session, "close", None)  # the fused runner's thread pool and buffers
        if callable(close):
            close()
        self.session = None  # type: ignore[assignment]
