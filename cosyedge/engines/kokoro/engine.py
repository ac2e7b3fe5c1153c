"""KokoroEngine: the embedded engine (Kokoro-82M int8 ONNX), one sentence per model call.

Responsible for turning phoneme ids + a 256-d style vector into audio; language handling lives in
the frontend, voice packs in ``presets``, and the calls in flight (an engine-wide limit on runs at
once, chunks in order) in ``pipeline``. It cannot clone or follow instructions natively and its
Capabilities say so; ``encode_prompt`` chooses the closest built-in voice (``closest_voice``).
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
from cosyedge.engines.base import (AudioChunk, CancelFn, Capabilities, ProgressFn, StepFn, SynthesisOptions,
                                   TextAnalysis, VoicePrompt, WordTiming)
from cosyedge.engines.kokoro import closest_voice, crop, fused_runtime, model_files, presets
from cosyedge.engines.kokoro.pipeline import Call, Overlap, RunSlots, Ticket, in_order
from cosyedge.engines.kokoro.sessions import Session, make_session
from cosyedge.engines.kokoro.silence import speech_bounds
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


def output_names(session: Any) -> list[str]:
    """A session's output names (a fused runner's or onnxruntime's); [] when it does not say."""
    names = getattr(session, "output_names", None)
    if names:
        return list(names)
    outputs = getattr(session, "get_outputs", None)
    return [o.name for o in outputs()] if callable(outputs) else []


def word_timings(words: Sequence[tuple[str, int, int]], durations: np.ndarray, first: int, length: int,
                 sample_rate: int) -> tuple[WordTiming, ...]:
    """When each word of a call is heard in the chunk: ``words`` are (text, first symbol, end symbol)
    in the call's phonemes, ``durations`` the model's frames per token (pad, symbols..., pad),
    ``first`` the sample of the uncropped call where the chunk starts (crop offset + trimmed
    silence), ``length`` the chunk's samples. Words wholly outside the chunk are left out."""
    edges = np.concatenate([[0], np.cumsum(durations.astype(np.int64))]) * model_files.SAMPLES_PER_FRAME
    timed = []
    for text, start, end in words:
        if end > len(durations) - 2 or start >= end:
            continue
        a = min(max(int(edges[start + 1]) - first, 0), length)  # +1: the leading pad token
        b = min(max(int(edges[end + 1]) - first, 0), length)
        if b > a:
            timed.append(WordTiming(text, a / sample_rate, b / sample_rate))
    return tuple(timed)


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
        or an encoded prompt: its closest built-in voice (``closest_voice``), read as that preset; a
        prompt that carries a style of its own (``arrays["style"]``: the benches' blends) reads that."""
        if isinstance(voice, VoicePrompt):
            if voice.engine == self.name and voice.meta.get("preset_voice") in presets.PRESETS:
                return presets.preset_pack(self.packs, voice.meta["preset_voice"], language)
            if voice.engine == self.name and "style" in voice.arrays:
                return voice.arrays["style"].astype(np.float32)
            raise ParameterError(f"this voice was encoded for {voice.engine}/{voice.model_id}, not for "
                                 f"{self.name}; encode the prompt again")
        return presets.preset_pack(self.packs, voice, language)

    def infer(self, token_ids: Sequence[int], pack: np.ndarray, speed: float) -> np.ndarray:
        """One model call: ids (≤ 510) + the pack row for that length -> float32 audio. It counts
        against the engine's run limit like a job's next sentence."""
        with self.runs.hold(Ticket(cost=call_cost(len(token_ids), speed), urgent=True)):
            return self._infer(token_ids, pack, speed)

    def _infer(self, token_ids: Sequence[int], pack: np.ndarray, speed: float) -> np.ndarray:
        """The model call itself; the caller holds a run slot."""
        return self._infer_timed(token_ids, pack, speed)[0]

    def _infer_timed(self, token_ids: Sequence[int], pack: np.ndarray,
                     speed: float) -> tuple[np.ndarray, np.ndarray | None, int]:
        """The model call: audio, the per-token durations when the runtime graph gives them (with
        the two pads), and where the returned audio starts in the uncropped call (the generator input
        crop's offset; 0 without it)."""
        if not token_ids:
            return np.zeros(0, dtype=np.float32), None, 0
        if len(token_ids) > MAX_PHONEMES:
            raise EngineError(f"sentence has {len(token_ids)} phonemes; the model takes at most {MAX_PHONEMES}")
        style = pack[min(len(token_ids), len(pack)) - 1].reshape(1, 256)
        feeds = {"tokens": np.array([[0, *token_ids, 0]], dtype=np.int64),
                 "style": np.ascontiguousarray(style, dtype=np.float32),
                 "speed": np.array([speed], dtype=np.float32)}
        names = output_names(self.session)
        wanted = [name for name in (model_files.DURATIONS_OUTPUT, crop.OFFSET_OUTPUT) if name in names]
        values = self.session.run([names[0], *wanted] if names else None, feeds)
        got = dict(zip(wanted, values[1:]))
        durations = got.get(model_files.DURATIONS_OUTPUT)
        offset = int(np.asarray(got.get(crop.OFFSET_OUTPUT, 0)).reshape(-1)[0])
        return (np.asarray(values[0], dtype=np.float32).reshape(-1),
                None if durations is None else np.asarray(durations).reshape(-1), offset)

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
        calls = []
        packs: dict[str, np.ndarray] = {}  # a preset may read each language with its own recipe
        for index, sentence in enumerate(sentences):
            language = getattr(sentence, "language", None) or "en"
            if language not in packs:
                packs[language] = self.style_pack(voice, language)
            pack = packs[language]
            ids = self.frontend.token_ids(sentence.phonemes)
            calls.append(Call(cost=call_cost(len(ids), options.speed),
                              run=partial(self._chunk, sentence, ids, index, total, pack, options.speed)))
        for chunk in in_order(calls, self.runs, self.parallel_runs, self.overlap, cancelled):
            yield chunk
            if progress is not None:
                progress(chunk.index + 1, total)

    def _chunk(self, sentence: Any, ids: list[int], index: int, total: int, pack: np.ndarray,
               speed: float) -> AudioChunk:
        """One sentence's call and its chunk (run by the pipeline, holding a run slot)."""
        audio, durations, offset = self._infer_timed(ids, pack, speed)
        pause = None
        ends = getattr(sentence, "ends_sentence", True)
        if not ends:
            pause = CLAUSE_PAUSE_S.get(getattr(sentence, "language", "en"), CLAUSE_PAUSE_S["en"])
        sr = self.capabilities.sample_rate
        start, end = speech_bounds(audio, sr)
        audio = audio[start:end]
        words = ()
        if durations is not None:
            words = word_timings(getattr(sentence, "words", ()), durations, offset + start, audio.size, sr)
        return AudioChunk(audio=np.clip(audio, -1.0, 1.0), sample_rate=sr, text=sentence.text, index=index,
                          total=total, pause_after_s=pause, ends_sentence=ends, words=words)

    def encode_prompt(self, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                      cancelled: CancelFn | None = None, step: StepFn | None = None) -> VoicePrompt:
        """The closest built-in voice (Kokoro cannot clone): a preset chosen by the prompt's pitch and
        d-vector (:func:`closest_voice.closest_voice`, well under a second: no ``step`` to say).
        ``transcript`` plays no part: the choice is made from the sound alone."""
        return closest_voice.closest_voice(self, audio, sample_rate)

    def is_current(self, voice: VoicePrompt) -> bool:
        """Whether an encoded prompt (a cached one) is this engine's current choice; the prompt cache
        makes an older one (the approximate voice match, an older table) again."""
        return closest_voice.is_current(voice.meta)

    def sounded(self, voice: VoicePrompt) -> str:
        """What an encoded prompt sounds like, in one name (:func:`closest_voice.sounded`): compared
        with an older encoding's to tell the answer that a voice's sound changed."""
        return closest_voice.sounded(voice.meta)

    def describe_voice(self, voice: VoicePrompt) -> Any:
        """What the answer calls a prompt's voice: "closest built-in voice / 最接近的内置音色: <preset>"."""
        return closest_voice.label(voice.meta.get("preset_voice", "?"))

    def voice_notes(self, voice: VoicePrompt) -> list[Any]:
        """Notes on a prompt's voice: chosen outside the pitch band or without a pitch, and its sound
        changed since an older encoding (:func:`closest_voice.notes`)."""
        return closest_voice.notes(voice.meta)

    def pronounce_with(self, readings: Callable[[], Any] | None) -> None:
        """Read every text with the pronunciation dictionary ``readings()`` returns at that moment
        (a :class:`cosyedge.lexicon.matching.Lexicon`; the service hands its book's in)."""
        self.frontend.readings = readings

    def close(self) -> None:
        """Stop the frontend's helper process, close and drop the session (it frees its arena)."""
        self.frontend.close()
        close = getattr(self.session, "close", None)  # the fused runner's thread pool and buffers
        if callable(close):
            close()
        self.session = None  # type: ignore[assignment]
