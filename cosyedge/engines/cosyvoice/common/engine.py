"""The CosyVoice2/3 engine: text + voice -> 24 kHz audio, one chunk per sentence (Engine protocol).

Responsible for choosing the mode and wiring the parts; the parts do the work:
``text_normalize`` + ``tokenizer`` (text ids), ``prompt_encoders`` (voice prompt), ``llm`` + ``sampling``
(speech tokens), ``token2wav`` (flow + HiFT). Modes, as upstream CosyVoice2 defines them:

====================  =============================================  ==================================
mode                  LLM input                                      flow condition
====================  =============================================  ==================================
zero-shot clone       prompt transcript + text, prompt speech tokens prompt tokens, mel, embedding
cross-lingual clone   text only (the prompt has no transcript)       prompt tokens, mel, embedding
instruct2             instruction + ``<|endofprompt|>`` + text       prompt tokens, mel, embedding
SFT preset            text only (+ instruction when given)           the preset's embedding only
====================  =============================================  ==================================

``options.language`` is not needed: like upstream, the text's script picks the normalization. The
model's version (from its manifest) names the engine (``cosyvoice2``, ``cosyvoice3``) and picks its
version description through the registry (:mod:`cosyedge.engines.cosyvoice.versions`): languages,
tokenizer specials, token2wav loader, instruction and zero-shot prompt formats, the text of a sentence
without a prompt text and the speech tokens the flow is given (``v2/version.py`` is the plain form,
``v3/version.py`` Fun-CosyVoice3's). The instruction limit is ``capabilities.max_instruct_chars``; the
LLM's v3 stop rule comes with its ``llm_config.json``.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from cosyedge.engines.base import (AudioChunk, CancelFn, Capabilities, PresetDetail, ProgressFn, StepFn,
                                   SynthesisOptions, TextAnalysis, VoicePrompt)
from cosyedge.engines.cosyvoice import versions
from cosyedge.engines.cosyvoice.common.hops import stream_hops
from cosyedge.engines.cosyvoice.common.instruct_format import format_instruction
from cosyedge.engines.cosyvoice.common.llm import MAX_TOKEN_TEXT_RATIO, SpeechLM
from cosyedge.engines.cosyvoice.common.readings import CosyReadingPass, shown
from cosyedge.engines.cosyvoice.common.quality import QUALITY_NAMES, Levers, levers_for
from cosyedge.engines.cosyvoice.common.sampling import Chooser, RasSampler
from cosyedge.engines.cosyvoice.common.text_normalize import TextNormalizer
from cosyedge.engines.cosyvoice.common.tokenizer import END_OF_PROMPT, TextTokenizer
from cosyedge.errors import CancelledError, NotFoundError, ParameterError, TextError
from cosyedge.lexicon.matching import Lexicon
from cosyedge.host.heap import trim_heap
from cosyedge.catalog.manifest import engine_name
from cosyedge.notes import Note

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000


def stream_cache_note(index: int, budget_mb: float) -> Note:
    """Says that sentence ``index`` (0-based) was finished whole: its streamed flow cache would
    have passed ``budget_mb`` (the setting ``stream_cache_max_mb``)."""
    return Note(f"sentence {index + 1} was too long to stream within the {budget_mb:g} MB flow cache "
                "budget (COSYEDGE_STREAM_CACHE_MAX_MB): its rest was rendered whole and sent at its end",
                code="stream_cache_limit", sentence=index + 1, budget_mb=budget_mb)


def read_presets(model) -> dict[str, np.ndarray]:
    """The model's preset speakers (``frontend.presets``: name -> embedding [192]); none without."""
    frontend = model.config("frontend")
    if not frontend.get("presets"):
        return {}
    with np.load(model.file(frontend["presets"]), allow_pickle=False) as npz:
        return {name: np.asarray(npz[name], dtype=np.float32).reshape(-1) for name in npz.files}


def prompt_encoder_factory(model, threads: int, mel_per_token: int | None = 2) -> Callable[[], object]:
    """Opens the model's prompt encoders (campplus, speech tokenizer) when a new voice comes."""
    def open_encoder():  # noqa: ANN202
        from cosyedge.engines.cosyvoice.common.prompt_encoders import PromptEncoder

        frontend = model.config("frontend")
        return PromptEncoder(model.session(frontend["campplus"], threads),
                             model.session(frontend["speech_tokenizer"], threads),
                             model.manifest.get("config", {}).get("features"), mel_per_token=mel_per_token)

    return open_encoder


def campplus_factory(model, threads: int) -> Callable[[], object]:
    """Opens the model's campplus alone, as a judge of finished audio (the speed-mode check)."""
    def open_judge():  # noqa: ANN202
        from cosyedge.engines.cosyvoice.common.prompt_encoders import CampplusJudge

        return CampplusJudge(model.session(model.config("frontend")["campplus"], threads))

    return open_judge


def prompt_arrays(voice: VoicePrompt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An encoded voice's (embedding [192], speech tokens, flow mel [T, 80]); a coded refusal when
    the encoding lacks one (made by another version of the encoder)."""
    try:
        embedding = np.asarray(voice.arrays["embedding"], dtype=np.float32).reshape(-1)
        tokens = np.asarray(voice.arrays["tokens"], dtype=np.int64).reshape(-1)
        mel = np.asarray(voice.arrays["mel"], dtype=np.float32)
    except KeyError as exc:
        raise ParameterError(f"voice prompt lacks {exc}; encode the recording again") from exc
    return embedding, tokens, mel


class CosyVoiceEngine:
    """CosyVoice2-0.5B on onnxruntime: native 3 s cloning, cross-lingual cloning and instructions."""

    def __init__(self, model_id: str, lm: SpeechLM, token2wav, tokenizer: TextTokenizer,
                 normalizer: TextNormalizer, prompt_encoder_factory, presets: dict[str, np.ndarray] | None = None,
                 sample_rate: int = SAMPLE_RATE, keep_prompt_encoder: bool = False,
                 lm_loader: Callable[[], SpeechLM] | None = None, version: int = 2,
                 stream_cache_mb: float = 0.0, judge_factory: Callable[[], object] | None = None) -> None:
        self.model_id = model_id
        self.version = version
        #: What this version does its own way (a module of the registry's description form).
        self.described = versions.description(version)
        #: The pronunciation dictionary now, read at each text (:meth:`pronounce_with`); None: none.
        self.readings: Callable[[], Lexicon] | None = None
        self.name = engine_name("cosyvoice", version)
        self._lm: SpeechLM | None = lm
        self.lm_config = lm.config
        # With a loader, the LLM (~0.4 GB resident) is dropped while a new voice is encoded and nobody
        # synthesizes, and reopened (~0.5 s) by the next sentence: the speech tokenizer (~0.5 GB as
        # upstream ships it) then never sits in memory next to it (docs/bench-log/cosyvoice.md, "CosyVoice LLM").
        self._lm_loader = lm_loader
        self._lm_users = 0
        self._lm_lock = threading.Lock()
        self.token2wav = token2wav
        # A streamed sentence's flow cache stops here (0 = no limit): past it the sentence is finished whole.
        self.stream_cache_mb = float(stream_cache_mb)
        self.tokenizer = tokenizer
        self.normalizer = normalizer
        self._presets = dict(presets or {})
        self._prompt_encoder_factory = prompt_encoder_factory
        # campplus alone (no speech tokenizer), opened for whoever judges finished audio by speaker
        self._judge_factory = judge_factory
        self._prompt_encoder = None
        # campplus + the speech tokenizer (~0.5 GB as upstream ships it) are needed only for a new voice
        # (the prompt cache keeps encodings); released after each use they never sit in memory next to
        # the LLM and flow activations of a synthesis.
        self.keep_prompt_encoder = keep_prompt_encoder
        self._lock = threading.Lock()
        languages = tuple(self.described.LANGUAGES)
        # Any SFT speaker reads every language the model does (as the clones do, cross-lingually).
        details = tuple(PresetDetail(name, {lang: {"speaker": name} for lang in languages if lang != "auto"})
                        for name in self.presets())
        self.capabilities = Capabilities(native_clone=True, native_instruct=True, languages=languages,
                                         sample_rate=sample_rate, preset_details=details,
                                         quality_modes=QUALITY_NAMES)

    @classmethod
    def load(cls, model_dir: Path, settings) -> "CosyVoiceEngine":
        """Open a converted model directory (verified through its manifest)."""
        from cosyedge.engines.cosyvoice.common.manifest import ModelDir

        model = ModelDir.load(model_dir)
        identity = model.identity
        from cosyedge.host.cpus import usable_cpus
        from cosyedge.engines.cosyvoice.common.calibrate import host_costs
        from cosyedge.engines.cosyvoice.common.threads import plan_threads

        threads = int(getattr(settings, "threads", 0) or 0) or usable_cpus()
        frontend = model.config("frontend")
        described = versions.description(identity.version)

        def open_token2wav(count: int):
            return described.load_token2wav(model, count)

        # The LLM and flow + HiFT overlap while a sentence streams: threads.py splits the CPUs by the
        # costs measured on this host (calibrate.py, once per host and model).
        costs = host_costs(model.path, lambda count: SpeechLM.load(model.path, threads=count), open_token2wav,
                           measure=bool(getattr(settings, "thread_calibration", True)))
        plan = plan_threads(threads, costs)
        logger.info("CosyVoice threads: %s", plan.describe())
        lm_threads = plan.lm
        lm = SpeechLM.load(model.path, threads=lm_threads)
        token2wav = open_token2wav(plan.render)
        tokenizer = TextTokenizer.load(model.path / frontend.get("tokenizer", "tokenizer"),
                                       described.SPECIALS)
        presets = read_presets(model)
        prompt_encoder = prompt_encoder_factory(model, threads)
        trim_heap()  # the graphs' protobuf copies are freed now; give them back
        logger.info("CosyVoice engine %s loaded (%d presets)", identity.model_id, len(presets))
        return cls(identity.model_id, lm, token2wav, tokenizer, TextNormalizer(tokenizer.encode),
                   prompt_encoder, presets, sample_rate=int(token2wav.sample_rate),
                   lm_loader=lambda: SpeechLM.load(model.path, threads=lm_threads), version=identity.version,
                   stream_cache_mb=float(getattr(settings, "stream_cache_max_mb", 0.0) or 0.0),
                   judge_factory=campplus_factory(model, threads))

    # -- voices and instructions -----------------------------------------------------------------
    def presets(self) -> list[str]:
        return sorted(self._presets)

    def format_instruction(self, instruction: str) -> str:
        """``instruction`` in this model version's prompt format (what the LLM reads before the text)."""
        return format_instruction(instruction, self.version)

    # -- the parts' memory ----------------------------------------------------------------------
    @property
    def lm(self) -> SpeechLM:
        """The speech LLM, reopened if it was released for a prompt encoding."""
        with self.using_lm() as lm:
            return lm

    @property
    def lm_loaded(self) -> bool:
        """True while the LLM is in memory (False between a prompt encoding and the next sentence)."""
        return self._lm is not None

    @property
    def lm_users(self) -> int:
        """How many syntheses are using the LLM right now (it is not released while any do)."""
        return self._lm_users

    @property
    def prompt_encoder_loaded(self) -> bool:
        """True while campplus + the speech tokenizer are in memory."""
        return self._prompt_encoder is not None

    @contextmanager
    def using_lm(self) -> Iterator[SpeechLM]:
        """The LLM, kept loaded until the block ends (a prompt encoding may not release it meanwhile)."""
        with self._lm_lock:
            if self._lm is None:
                logger.info("reopening the CosyVoice LLM")
                self._lm = self._lm_loader()
            self._lm_users += 1
            lm = self._lm
        try:
            yield lm
        finally:
            with self._lm_lock:
                self._lm_users -= 1

    def _release_lm_if_idle(self) -> bool:
        """Drop the LLM if it can be reopened and no synthesis is using it; True if dropped."""
        with self._lm_lock:
            if self._lm_loader is None or self._lm is None or self._lm_users:
                return False
            self._lm.close()
            self._lm = None
        trim_heap()
        return True

    @property
    def prompt_encoder(self):
        """campplus + speech tokenizer, opened when needed (only cloning needs them)."""
        with self._lock:
            if self._prompt_encoder is None:
                self._prompt_encoder = self._prompt_encoder_factory()
            return self._prompt_encoder

    def release_prompt_encoder(self) -> None:
        """Drop campplus + the speech tokenizer; the next new voice opens them again."""
        with self._lock:
            self._prompt_encoder = None
        trim_heap()

    def speaker_judge(self) -> Callable[[np.ndarray, int], np.ndarray] | None:
        """The model's own speaker encoder (campplus) as ``embed(audio, sample_rate)``, opened for
        the caller and dropped with the function (the speed-mode check); None when the model was
        built without one."""
        if self._judge_factory is None:
            return None
        return self._judge_factory().embed

    def prompt_steps(self) -> int:
        """How many steps the next :meth:`encode_prompt` will say: opening the prompt encoders when
        they are closed, then speech tokens, prompt mel and speaker embedding."""
        from cosyedge.engines.cosyvoice.common.prompt_encoders import PromptEncoder

        return len(PromptEncoder.STEPS) + (1 if self._prompt_encoder is None else 0)

    def encode_prompt(self, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                      cancelled: CancelFn | None = None, step: StepFn | None = None) -> VoicePrompt:
        """Speaker embedding, prompt speech tokens and prompt mel of a recording (+ its transcript);
        ``step`` hears each step as it starts (:meth:`prompt_steps` of them)."""
        if self._release_lm_if_idle():
            logger.debug("LLM released while the prompt encoders run")
        opening = self._prompt_encoder is None  # then opening them is the first step
        total, done = self.prompt_steps(), 0

        def say(stage: str) -> None:
            nonlocal done
            done += 1
            if step is not None:
                step(done, total, stage)

        if opening:
            say("encoders")
        encoder = self.prompt_encoder
        try:
            encoded = encoder.encode(audio, sample_rate, say)
        finally:
            del encoder
            if not self.keep_prompt_encoder:
                self.release_prompt_encoder()
        text = (transcript or "").strip()
        meta = {"transcript": self.normalizer.normalize(text) if text else None,
                "duration_s": round(float(np.asarray(audio).size) / sample_rate, 3),
                "tokens": int(encoded.tokens.size)}
        return VoicePrompt(engine=self.name, model_id=self.model_id,
                           arrays={"embedding": encoded.embedding, "tokens": encoded.tokens, "mel": encoded.mel},
                           meta=meta)

    # -- synthesis ------------------------------------------------------------------------------
    def _conditioning(self, voice: str | VoicePrompt | None, instruct: str | None):
        """(LLM prompt text ids, LLM prompt speech, flow tokens, flow mel, embedding, mode name)."""
        instruct_ids: list[int] = []
        if instruct:
            limit = self.capabilities.max_instruct_chars
            if len(instruct) > limit:
                raise ParameterError(f"instruction is {len(instruct)} characters; keep it under {limit}")
            text = instruct if END_OF_PROMPT in instruct else self.format_instruction(instruct)
            instruct_ids = self.tokenizer.encode(text)
        empty_tokens = np.zeros(0, dtype=np.int64)
        empty_mel = np.zeros((0, 80), dtype=np.float32)
        if isinstance(voice, VoicePrompt):
            if voice.engine != self.name:
                raise ParameterError(f"this voice was encoded for the {voice.engine!r} engine; "
                                     "encode the recording again for CosyVoice")
            embedding, tokens, mel = prompt_arrays(voice)
            if instruct_ids:
                return instruct_ids, [], tokens, mel, embedding, "instruct2"
            transcript = voice.meta.get("transcript")
            if transcript:
                transcript = self.described.zero_shot_prompt(transcript)
                return self.tokenizer.encode(transcript), tokens.tolist(), tokens, mel, embedding, "zero_shot"
            return [], [], tokens, mel, embedding, "cross_lingual"
        if isinstance(voice, str) and voice:
            if voice not in self._presets:
                known = ", ".join(self.presets()) or "none in this model"
                raise NotFoundError(f"unknown CosyVoice preset {voice!r} (presets: {known})")
            return instruct_ids, [], empty_tokens, empty_mel, self._presets[voice], "sft"
        raise ParameterError("CosyVoice needs a voice: upload or record a prompt, or pick a preset")

    def pronounce_with(self, readings: Callable[[], Lexicon] | None) -> None:
        """Read every text with the pronunciation dictionary ``readings()`` returns at that moment
        (the service hands its book's in); inline readings are read either way."""
        self.readings = readings

    def quality_levers(self, quality: str | None, flow_steps: int | None = None) -> Levers:
        """The levers this model applies for mode ``quality`` (None: exact) and an explicit
        ``flow_steps`` (which wins over the mode's): the mode's, less :attr:`inapplicable_levers`."""
        levers = levers_for(quality, flow_steps)
        return replace(levers, **{name: 0 for name in self.inapplicable_levers})

    @property
    def inapplicable_levers(self) -> dict[str, str]:
        """The streaming levers this model has no use for, each with the reason (the answer's note
        names them apart from the levers applied): both where the model does not stream; the left
        context where its streamed cache cannot drop chunks (converted before the chunk-blocked
        cache); the first hop where the stream cannot shorten it (CosyVoice3's is upstream's)."""
        t2w = self.token2wav
        if not getattr(t2w, "can_stream", False):
            why = "this conversion does not stream (each sentence is rendered whole)"
            return {"left_chunks": why, "first_hop_tokens": why}
        skipped = {}
        if not getattr(t2w, "can_bound_context", False):
            skipped["left_chunks"] = "this conversion's streamed cache keeps every chunk"
        if not getattr(t2w, "can_shorten_first_hop", False):
            skipped["first_hop_tokens"] = "this model's stream keeps upstream's first hop"
        return skipped

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        """The normalized pieces :meth:`synthesize` reads, one LLM call each (upstream's
        normalization and split lengths), with the pronunciation dictionary's and the inline
        readings spelled in as this version takes them (:mod:`.readings`; the notes say which).
        CosyVoice reads every script and picks the normalization from the text itself, so nothing
        is skipped and the language setting needs no note."""
        lexicon = self.readings() if self.readings is not None else Lexicon()
        readings = CosyReadingPass(lexicon, self.described.spell_reading, self.name)
        sentences = tuple(readings.apply(piece) for piece in self.normalizer.split(readings.mark_inline(text)))
        if not sentences:
            raise TextError("the text has nothing to speak (only punctuation or markup)")
        return TextAnalysis(text=text, language=language, sentences=sentences,
                            notes=tuple(readings.report.notes(lexicon)))

    def synthesize(self, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
                   progress: ProgressFn | None = None, cancelled: CancelFn | None = None) -> Iterator[AudioChunk]:
        """Yield one :class:`AudioChunk` per sentence; raises :class:`CancelledError` when asked to stop."""
        prompt_text, prompt_speech, flow_tokens, flow_mel, embedding, mode = \
            self._conditioning(voice, (options.instruct or "").strip() or None)
        sentences = (text if isinstance(text, TextAnalysis) else self.analyze(text, options.language)).sentences
        seed = options.seed if options.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
        rng = np.random.default_rng(seed)
        chooser: Chooser = RasSampler(eos=self.lm_config.masked_id, seed=int(rng.integers(2 ** 31)))
        # CosyVoice3 reads <|endofprompt|> in every input: cross-lingual and preset sentences carry it.
        add_prompt = self.described.EVERY_INPUT_ENDS_PROMPT and self.tokenizer.end_of_prompt_id not in prompt_text
        levers = self.quality_levers(options.quality, options.n_timesteps)
        logger.debug("synthesize: mode %s, %d sentences, seed %d, levers %s", mode, len(sentences), seed, levers)
        total = len(sentences)
        for index, sentence in enumerate(sentences):
            if cancelled is not None and cancelled():
                raise CancelledError("synthesis cancelled")
            text_ids = self.tokenizer.encode(self.described.cross_lingual_text(sentence) if add_prompt else sentence)
            if self._streams(options):
                yield from self._sentence_hops(sentence, index, total, text_ids, chooser,
                                               (prompt_text, prompt_speech, flow_tokens, flow_mel, embedding),
                                               levers, rng, progress, cancelled)
                continue
            with self.using_lm() as lm:
                tokens = lm.generate(text_ids, chooser, prompt_text, prompt_speech, cancelled=cancelled)
            tokens = self.described.speech_tokens(tokens)
            if tokens:
                audio = self.token2wav(tokens, flow_tokens, flow_mel, embedding, speed=options.speed, rng=rng,
                                       n_timesteps=levers.flow_steps, cfg_steps=levers.cfg_steps)
            else:
                audio = np.zeros(0, dtype=np.float32)
            if progress is not None:
                progress(index + 1, total)
            yield AudioChunk(audio=np.asarray(audio, dtype=np.float32), sample_rate=self.capabilities.sample_rate,
                             text=shown(sentence), index=index, total=total)

    def _streams(self, options: SynthesisOptions) -> bool:
        """Hop-by-hop for a streamed request, where the model has the streaming graphs; upstream
        streams at speed 1 only (a speed change resamples the whole sentence's mel)."""
        return bool(options.stream and getattr(self.token2wav, "can_stream", False) and options.speed == 1.0)

    def _sentence_hops(self, sentence, index, total, text_ids, chooser, conditioning, levers: Levers, rng,
                       progress, cancelled) -> Iterator[AudioChunk]:  # noqa: ANN001 - synthesize's locals
        """One sentence as hops (LLM decoding overlapped with flow + HiFT, :mod:`hops`)."""
        prompt_text, prompt_speech, flow_tokens, flow_mel, embedding = conditioning
        renderer = self.token2wav.stream(flow_tokens, flow_mel, embedding, n_timesteps=levers.flow_steps,
                                         rng=rng, cache_budget=int(self.stream_cache_mb * 2 ** 20),
                                         expected_tokens=int(MAX_TOKEN_TEXT_RATIO * len(text_ids)),
                                         cfg_steps=levers.cfg_steps, left_chunks=levers.left_chunks,
                                         first_hop_tokens=levers.first_hop_tokens)
        sr = self.capabilities.sample_rate
        try:
            with self.using_lm() as lm:
                def decode(stop):  # noqa: ANN001, ANN202
                    return lm.iter_tokens(text_ids, chooser, prompt_text, prompt_speech, cancelled=stop)

                for audio, last in stream_hops(decode, renderer, cancelled):
                    if last and progress is not None:
                        progress(index + 1, total)
                    notes = (stream_cache_note(index, self.stream_cache_mb),) if last and renderer.limited else ()
                    yield AudioChunk(audio=np.asarray(audio, dtype=np.float32), sample_rate=sr, text=shown(sentence),
                                     index=index, total=total, continues=not last, notes=notes)
        finally:  # a cancel, an error or a client gone: the flow's caches go now, not when collected
            renderer.close()

    def close(self) -> None:
        with self._lm_lock:
            if self._lm is not None:
                self._lm.close()
            self._lm = None
        self._prompt_encoder = None
