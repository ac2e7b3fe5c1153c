"""The CosyVoice-300M engine (base, SFT, Instruct): text + voice -> 22.05 kHz audio, one chunk per sentence,
or hop by hop as upstream streams v1 when the request streams (at speed 1).

The CosyVoice2 engine's frame (LLM release while a voice is encoded, the prompt encoders opened on
demand, the text normalizer, the sampler) with v1's parts (``llm``, ``token2wav``,
``tiktoken_bpe``, ``version``) and v1's modes, as upstream ``cli/frontend.py`` @46dfe04 builds them:

=============  ===============================================  =======================================
mode           LLM input                                        flow condition
=============  ===============================================  =======================================
sft            text; the preset's embedding                     the preset's embedding
zero_shot      prompt transcript + text, prompt tokens,         prompt tokens, mel, embedding
               the prompt's embedding
cross_lingual  text; the prompt's embedding                     prompt tokens, mel, embedding
instruct       instruction + ``<endofprompt>`` + text, no       the preset's embedding
               embedding ("information leakage")
=============  ===============================================  =======================================

Which model offers which mode is written by the converter (manifest ``config.model.modes``): sft needs
preset speakers (SFT, Instruct), instruct the Instruct model. v1 instruct conditions on a preset
speaker, so an instruction with a cloned voice is refused, naming the mode. The seed's preset names map
to the closest SFT speakers (:data:`SEED_ALIASES`); there is no child speaker, and /voices says so.

The ``quality`` modes apply where they mean something on v1 (:meth:`CosyVoice1Engine.quality_levers`):
the flow steps and the CFG schedule (whole and streamed) and a streamed answer's first hop (the mode's
length of audio in v1's 50 Hz tokens). The flow is not chunk-causal, so the bounded left context
does not apply (:data:`NOT_APPLICABLE`; the answer's note names it).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np

from cosyedge.engines.base import (AudioChunk, CancelFn, Capabilities, PresetDetail, ProgressFn,
                                   SynthesisOptions, TextAnalysis, VoicePrompt)
from cosyedge.engines.cosyvoice.common.engine import (CosyVoiceEngine, campplus_factory, prompt_arrays,
                                                    prompt_encoder_factory, read_presets)
from cosyedge.engines.cosyvoice.common.hops import stream_hops
from cosyedge.engines.cosyvoice.common.instruct_format import V1_END, format_instruction
from cosyedge.engines.cosyvoice.common.quality import QUALITY_NAMES, Levers, levers_for
from cosyedge.engines.cosyvoice.common.readings import shown
from cosyedge.engines.cosyvoice.common.sampling import RasSampler
from cosyedge.engines.cosyvoice.common.text_normalize import TextNormalizer
from cosyedge.engines.cosyvoice.v1.version import LANGUAGES
from cosyedge.errors import CancelledError, NotFoundError, ParameterError
from cosyedge.notes import Note

logger = logging.getLogger(__name__)

SAMPLE_RATE = 22050
#: The seed's preset names -> the closest CosyVoice-300M-SFT speaker: its two Mandarin speakers first
#: (the seed's text is Chinese), then the English pair. Used only where the model ships that speaker.
SEED_ALIASES = {"female_1": "中文女", "female_2": "英文女", "male_1": "中文男", "male_2": "英文男"}
#: Seed names with no SFT speaker behind them, and what they would be (listed in /voices' preset_details).
SEED_MISSING = {"child": "child speaker"}
#: The quality levers that mean nothing on CosyVoice-300M, and why (the answer's ``quality_levers`` note).
NOT_APPLICABLE = {"left_chunks": "the CosyVoice-300M flow is not chunk-causal (each hop's flow reads the prompt "
                                 "and the whole hop at once), so there is no left context to bound"}


class CosyVoice1Engine(CosyVoiceEngine):
    """CosyVoice-300M / -SFT / -Instruct on onnxruntime: preset speakers, 3 s cloning, instructions."""

    #: Lever -> why this model has no use for it (:mod:`~cosyedge.engines.cosyvoice.common.quality`).
    inapplicable_levers = NOT_APPLICABLE

    def __init__(self, *args, variant: str = "base", variant_name: str = "CosyVoice-300M",
                 modes: tuple[str, ...] = ("zero_shot", "cross_lingual"), **kwargs) -> None:
        kwargs.setdefault("sample_rate", SAMPLE_RATE)
        super().__init__(*args, version=1, **kwargs)
        self.variant, self.variant_name, self.modes = variant, variant_name, tuple(modes)
        names = self.presets()
        languages = tuple(lang for lang in LANGUAGES if lang != "auto")
        details = [PresetDetail(name, {lang: {"speaker": self.aliases.get(name, name)} for lang in languages})
                   for name in names]
        if self._presets:
            speakers = ", ".join(self._presets)
            details += [PresetDetail(seed, {}, note=f"no {what} among this model's SFT speakers ({speakers}); "
                                                    "not offered") for seed, what in SEED_MISSING.items()]
        self.capabilities = Capabilities(native_clone=True, native_instruct="instruct" in self.modes,
                                         languages=LANGUAGES, sample_rate=self.capabilities.sample_rate,
                                         preset_details=tuple(details), quality_modes=QUALITY_NAMES)

    @classmethod
    def load(cls, model_dir: Path, settings) -> "CosyVoice1Engine":
        """Open a converted CosyVoice-300M directory (verified through its manifest)."""
        from cosyedge.engines.cosyvoice.v1.llm import SpeechLMv1
        from cosyedge.engines.cosyvoice.common.manifest import ModelDir
        from cosyedge.engines.cosyvoice.v1.tiktoken_bpe import TiktokenBPE
        from cosyedge.engines.cosyvoice.v1.token2wav import Token2WavV1
        from cosyedge.host.cpus import usable_cpus
        from cosyedge.host.heap import trim_heap

        model = ModelDir.load(model_dir)
        threads = int(getattr(settings, "threads", 0) or 0) or usable_cpus()
        frontend, about = model.config("frontend"), model.config("model")
        # A v1 sentence decodes, then renders: the LLM runs alone, so it gets every thread (two
        # jobs at once share the session's threads, as flow and HiFT do).
        lm_threads = threads
        tokenizer = TiktokenBPE.load(model.path / frontend.get("tokenizer", "tokenizer"))
        presets = read_presets(model)
        prompt_encoder = prompt_encoder_factory(model, threads, mel_per_token=None)
        token2wav = Token2WavV1.load(model, threads=threads)
        trim_heap()
        logger.info("CosyVoice-300M engine %s loaded (%s, %d presets)", model.identity.model_id,
                    about.get("name"), len(presets))
        return cls(model.identity.model_id, SpeechLMv1.load(model, threads=lm_threads), token2wav, tokenizer,
                   TextNormalizer(tokenizer.encode), prompt_encoder, presets, sample_rate=token2wav.sample_rate,
                   lm_loader=lambda: SpeechLMv1.load(model, threads=lm_threads),
                   variant=str(about.get("variant", "base")), variant_name=str(about.get("name", "CosyVoice-300M")),
                   modes=tuple(about.get("modes", ("zero_shot", "cross_lingual"))),
                   judge_factory=campplus_factory(model, threads))

    @property
    def aliases(self) -> dict[str, str]:
        """Seed preset name -> the SFT speaker it plays (only those this model ships)."""
        return {seed: speaker for seed, speaker in SEED_ALIASES.items() if speaker in self._presets}

    def presets(self) -> list[str]:
        """The SFT speakers in the model's order, then the seed names that map to one of them."""
        return list(self._presets) + list(self.aliases)

    def format_instruction(self, instruction: str) -> str:
        return format_instruction(instruction, 1)

    def quality_levers(self, quality: str | None, flow_steps: int | None = None) -> Levers:
        """The levers this model applies for mode ``quality`` (None: exact) and an explicit
        ``flow_steps`` (which wins over the mode's): the steps and the CFG schedule, and the first
        hop in this model's tokens (``Token2WavV1.first_hop``); no left context (:data:`NOT_APPLICABLE`)."""
        levers = levers_for(quality, flow_steps)
        return replace(levers, left_chunks=0, first_hop_tokens=self.token2wav.first_hop(levers.first_hop_tokens))

    def instruct_notes(self) -> tuple[Note, ...]:
        """What the answer says when this model is given an instruction it cannot follow: the service
        then reads it as app controls (speed, volume, pitch, voice), as for the embedded engine. Only
        the Instruct model follows instructions; the others say so instead of refusing, because the
        controls do apply."""
        if "instruct" in self.modes:
            return ()
        return (Note(f"instruction read as app controls: {self.variant_name} ({self.model_id}) has no instruct "
                     "mode (only CosyVoice-300M-Instruct follows instructions); what the app applied is "
                     "listed with the instruction", code="instruct_as_controls", mode="instruct",
                     model=self.model_id, model_name=self.variant_name),)

    def _refuse(self, mode: str, why: str) -> ParameterError:
        return ParameterError(f"{self.variant_name} ({self.model_id}) does not offer {mode} mode: {why}",
                              code="mode_not_supported", mode=mode, model=self.model_id,
                              model_name=self.variant_name)

    def conditioning(self, voice: str | VoicePrompt | None, instruct: str | None) -> dict:
        """What the LLM and the flow read for this voice and instruction (the table in the module doc)."""
        if isinstance(voice, VoicePrompt):
            if voice.engine != self.name:
                raise ParameterError(f"this voice was encoded for the {voice.engine!r} engine; "
                                     "encode the recording again for CosyVoice-300M")
            if instruct:
                if "instruct" in self.modes:
                    raise ParameterError(
                        f"{self.variant_name} follows an instruction with one of its preset speakers (instruct "
                        "mode); a cloned voice with an instruction is not supported: pick a preset, or drop "
                        "the instruction to clone", code="mode_not_supported", mode="instruct",
                        model=self.model_id, model_name=self.variant_name)
                raise self._refuse("instruct", "only CosyVoice-300M-Instruct follows instructions")
            embedding, tokens, mel = prompt_arrays(voice)
            transcript = voice.meta.get("transcript")
            flow = {"flow_tokens": tokens, "flow_mel": mel, "flow_embedding": embedding}
            if transcript:
                return {"mode": "zero_shot", "prompt_text": self.tokenizer.encode(transcript),
                        "prompt_speech": tokens.tolist(), "llm_embedding": embedding, **flow}
            return {"mode": "cross_lingual", "prompt_text": [], "prompt_speech": [], "llm_embedding": embedding,
                    **flow}
        if not self._presets:
            raise self._refuse("sft", "it ships no preset speakers; upload or record a voice to clone")
        name = voice if isinstance(voice, str) and voice else self.presets()[0]
        speaker = self.aliases.get(name, name)
        if speaker not in self._presets:
            raise NotFoundError(f"unknown CosyVoice-300M preset {name!r} (presets: {', '.join(self.presets())})",
                                code="preset_unknown", name=name, choices=tuple(self.presets()))
        embedding = self._presets[speaker]
        flow = {"flow_tokens": np.zeros(0, np.int64), "flow_mel": np.zeros((0, 80), np.float32),
                "flow_embedding": embedding}
        if instruct:
            if "instruct" not in self.modes:
                raise self._refuse("instruct", "only CosyVoice-300M-Instruct follows instructions")
            limit = self.capabilities.max_instruct_chars
            if len(instruct) > limit:
                raise ParameterError(f"instruction is {len(instruct)} characters; keep it under {limit}")
            # options.instruct comes formatted; upstream normalizes the bare instruction, then appends the end mark
            bare = format_instruction(instruct, 1)[:-len(V1_END)]
            text = format_instruction(self.normalizer.normalize(bare) if bare else bare, 1)
            return {"mode": "instruct", "prompt_text": self.tokenizer.encode(text), "prompt_speech": [],
                    "llm_embedding": None, **flow}
        return {"mode": "sft", "prompt_text": [], "prompt_speech": [], "llm_embedding": embedding, **flow}

    def synthesize(self, text: str | TextAnalysis, voice: str | VoicePrompt, options: SynthesisOptions,
                   progress: ProgressFn | None = None, cancelled: CancelFn | None = None) -> Iterator[AudioChunk]:
        """Yield one :class:`AudioChunk` per sentence, or per hop when ``options.stream`` (at speed 1; every
        hop but a sentence's last ``continues``); raises :class:`CancelledError` when asked to stop."""
        cond = self.conditioning(voice, (options.instruct or "").strip() or None)
        sentences = (text if isinstance(text, TextAnalysis) else self.analyze(text, options.language)).sentences
        seed = options.seed if options.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
        rng = np.random.default_rng(seed)
        chooser = RasSampler(eos=self.lm_config.eos, seed=int(rng.integers(2 ** 31)))
        levers = self.quality_levers(options.quality, options.n_timesteps)
        logger.debug("synthesize v1: mode %s, %d sentences, seed %d, levers %s", cond["mode"], len(sentences), seed,
                     levers)
        total = len(sentences)
        for index, sentence in enumerate(sentences):
            if cancelled is not None and cancelled():
                raise CancelledError("synthesis cancelled")
            if self._streams(options):
                yield from self._hops(sentence, index, total, chooser, cond, levers, rng, progress, cancelled)
                continue
            with self.using_lm() as lm:
                tokens = lm.generate(self.tokenizer.encode(sentence), chooser, cond["prompt_text"],
                                     cond["prompt_speech"], cond["llm_embedding"], cancelled=cancelled)
            audio = (self.token2wav(tokens, cond["flow_tokens"], cond["flow_mel"], cond["flow_embedding"],
                                    speed=options.speed, rng=rng, n_timesteps=levers.flow_steps,
                                    cfg_steps=levers.cfg_steps) if tokens else np.zeros(0, np.float32))
            if progress is not None:
                progress(index + 1, total)
            yield AudioChunk(audio=np.asarray(audio, dtype=np.float32), sample_rate=self.capabilities.sample_rate,
                             text=shown(sentence), index=index, total=total)

    def _hops(self, sentence: str, index: int, total: int, chooser, cond: dict, levers: Levers,
              rng: np.random.Generator, progress: ProgressFn | None,
              cancelled: CancelFn | None) -> Iterator[AudioChunk]:
        """One sentence as upstream streams v1 (``Token2WavV1Stream``): the LLM decodes in its own
        thread while flow and HiFT render the hop before (:func:`stream_hops`)."""
        renderer = self.token2wav.stream(cond["flow_tokens"], cond["flow_mel"], cond["flow_embedding"],
                                         n_timesteps=levers.flow_steps, rng=rng, cfg_steps=levers.cfg_steps,
                                         first_hop_tokens=levers.first_hop_tokens)
        text_ids = self.tokenizer.encode(sentence)
        sr = self.capabilities.sample_rate
        with self.using_lm() as lm:
            def decode(stop):  # noqa: ANN001, ANN202
                return lm.iter_tokens(text_ids, chooser, cond["prompt_text"], cond["prompt_speech"],
                                      cond["llm_embedding"], cancelled=stop)

            for audio, last in stream_hops(decode, renderer, cancelled):
                if last and progress is not None:
                    progress(index + 1, total)
                yield AudioChunk(audio=np.asarray(audio, dtype=np.float32), sample_rate=sr, text=shown(sentence),
                                 index=index, total=total, continues=not last)
