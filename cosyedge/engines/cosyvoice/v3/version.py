"""What is particular to Fun-CosyVoice3 at run time, in the version-description form
(:class:`cosyedge.engines.cosyvoice.versions.Cosy2FormDescription`); the CosyVoice2-form engine applies it
when its manifest says version 3 (the registry, :mod:`cosyedge.engines.cosyvoice.versions`, picks it).

* Prompt format: every LLM input must contain ``<|endofprompt|>`` (upstream asserts id 151646). The
  zero-shot prompt text is ``"You are a helpful assistant.<|endofprompt|>" + transcript``; a cross-lingual
  sentence is ``"You are a helpful assistant.<|endofprompt|>" + sentence`` (upstream's examples); an
  instruction is ``"You are a helpful assistant. <instruction><|endofprompt|>"`` (:func:`format_instruction`).
* Decoding (``llm_config.json``): ids 6561-6760 all end the speech; below the minimum length upstream
  masks id 6561 (its sos), not 6562 (end of speech), so a v3 model may stop early: reproduced as is.
* Silent tokens: after 5 in a row, further silent/breath tokens are not given to the flow (upstream's
  ``llm_job``); the LLM still sees them.
* Tokenizer: CosyVoice2's specials plus ``<|endofsystem|>``, ARPAbet and pinyin phone tokens.
* Flow: the same solver as CosyVoice2 on the DiT graphs; vocoder: :mod:`causal_hift`; streamed hop by
  hop on upstream's schedule by :mod:`stream` (models converted with the streamed DiT graph).
* Languages: zh, en, ja, ko, de, es, fr, it, ru (upstream README), plus 18+ Chinese dialects by instruction.
"""

from __future__ import annotations

import logging
from typing import Iterable

import numpy as np

from cosyedge.engines.base import KNOWN_LANGUAGES
from cosyedge.engines.cosyvoice.common.tokenizer import COSYVOICE2_SPECIALS, END_OF_PROMPT
from cosyedge.engines.cosyvoice.common.readings import phone_spelling
from cosyedge.lexicon.entries import Entry

logger = logging.getLogger(__name__)

VERSION = 3
SYSTEM_PROMPT = "You are a helpful assistant."
SILENT_TOKENS = frozenset((1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323))
MAX_SILENT_RUN = 5
LANGUAGES = KNOWN_LANGUAGES

_ARPABET_VOWELS = "AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split()
_ARPABET_CONSONANTS = "B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split()
#: Pinyin initials and finals with tone marks, as upstream's CosyVoice3Tokenizer registers them.
_PINYIN = (
    "a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié iòng "
    "ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh t u uang "
    "ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ uǎi uǎn uǎng "
    "uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn ìng í ín íng ò "
    "òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng ōu ū ūn ǎ ǎi ǎn "
    "ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ").split()


def _arpabet() -> list[str]:
    phones = [v + s for v in _ARPABET_VOWELS for s in ("", "0", "1", "2")] + _ARPABET_CONSONANTS
    return [f"[{p}]" for p in sorted(phones)]


#: Added to the Qwen2 tokenizer by upstream's ``CosyVoice3Tokenizer``, in this order.
COSYVOICE3_SPECIALS = COSYVOICE2_SPECIALS + ("<|endofsystem|>",) + tuple(_arpabet()) + \
    tuple(f"[{p}]" for p in _PINYIN)


SPECIALS = COSYVOICE3_SPECIALS
_PHONE_TOKENS = frozenset(SPECIALS)
#: Every LLM input carries ``<|endofprompt|>``: a sentence without a prompt text gets the system prompt.
EVERY_INPUT_ENDS_PROMPT = True


def format_instruction(text: str) -> str:
    """A cleaned instruction after the system sentence (written once), then the end-of-prompt token."""
    if text.startswith(SYSTEM_PROMPT):
        text = text[len(SYSTEM_PROMPT):].strip()
    return f"{SYSTEM_PROMPT} {text}{END_OF_PROMPT}"


def zero_shot_prompt(transcript: str) -> str:
    """The LLM prompt text of a zero-shot clone: system sentence, end of prompt, the transcript."""
    return f"{SYSTEM_PROMPT}{END_OF_PROMPT}{transcript}"


def cross_lingual_text(sentence: str) -> str:
    """A cross-lingual sentence as v3 reads it (there is no prompt text to carry the end of prompt)."""
    return sentence if END_OF_PROMPT in sentence else f"{SYSTEM_PROMPT}{END_OF_PROMPT}{sentence}"


def drop_long_silences(tokens: Iterable[int]) -> list[int]:
    """Upstream's rule: a silent token is dropped when more than 5 silent tokens precede it in a row."""
    kept, run = [], 0
    for token in tokens:
        if token in SILENT_TOKENS:
            run += 1
            if run > MAX_SILENT_RUN:
                continue
        else:
            run = 0
        kept.append(int(token))
    return kept


def speech_tokens(tokens: Iterable[int]) -> list[int]:
    """The LLM's speech tokens as the flow is given them: long silent runs cut (:func:`drop_long_silences`)."""
    return drop_long_silences(tokens)


def load_token2wav(model, threads: int = 0):
    """A :class:`~cosyedge.engines.cosyvoice.v3.stream.Token2WavV3` of the DiT flow and the causal HiFT;
    it streams where the model was converted with the DiT chunk-step graph (``flow.stream``); a model
    converted before answers each sentence whole."""
    from cosyedge.engines.cosyvoice.v3.causal_hift import CausalF0Predictor, CausalHiftVocoder
    from cosyedge.engines.cosyvoice.v3.stream import ChunkLayout, HopSchedule, Token2WavV3
    from cosyedge.engines.cosyvoice.common.flow import FlowDecoder, FlowParams
    from cosyedge.engines.cosyvoice.common.hift import HiftParams

    fc, hc = model.config("flow"), model.config("hift")
    params, noise = FlowParams.from_dict(fc), np.load(model.file(fc["noise"]))
    flow = FlowDecoder(model.session(fc["encoder"], threads), model.session(fc["estimator"], threads), noise, params)
    stream = fc.get("stream") if isinstance(fc.get("stream"), dict) else {}
    open_step = (lambda: model.session(stream["estimator"], threads)) if stream else None  # noqa: E731
    with np.load(model.file(hc["f0"])) as f0, np.load(model.file(hc["source"])) as source:
        predictor = CausalF0Predictor({k: f0[k] for k in f0.files})
        weight, bias = source["weight"], source["bias"]
    vocoder = CausalHiftVocoder(predictor, model.session(hc["decoder"], threads), weight, bias,
                                HiftParams.from_dict(hc), f0_lookahead=int(hc.get("f0_lookahead", 3)),
                                look_right=int(hc.get("conv_pre_look_right", 4)))
    return Token2WavV3(flow, vocoder, open_step=open_step, layout=ChunkLayout.from_dict(stream),
                       schedule=HopSchedule.from_dict(stream))


def spell_reading(entry: Entry) -> tuple[str | None, str]:
    """Fun-CosyVoice3's pronunciation inpainting: pinyin initials and tone-marked finals or ARPAbet
    phones as its phone tokens, kana as katakana
    (:func:`cosyedge.engines.cosyvoice.common.readings.phone_spelling`)."""
    return phone_spelling(entry, _PHONE_TOKENS)
