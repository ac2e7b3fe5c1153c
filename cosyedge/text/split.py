"""Clauses and sentences from normalized text, and word-boundary splitting of over-long pieces.

A *clause* is the text between two punctuation marks; its closing punctuation is kept twice: as
written (for display) and as the one Kokoro symbol it maps to (``，、,`` -> ``,``, ``。．.`` -> ``.``,
``？?`` -> ``?``, ``！!`` -> ``!``, ``；;`` -> ``;``, ``：:`` -> ``:``, ``…`` and ``...`` -> ``…``,
``—`` -> ``—``; a run of marks such as ``?!`` keeps the strongest). ``。．.!?！？`` and line breaks end a
sentence; commas, colons, semicolons, dashes and ellipses do not. Quotes and brackets are not spoken
and only separate words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_SENTENCE_MARKS = set("。．.!?！？\n")
_MARK = r"(?:[。．!?！？\n,，、;；:：…—~～]|(?<!\d)\.|\.(?!\d))"  # a dot between digits is a decimal point
_PUNCT_RUN = re.compile(rf"{_MARK}(?:{_MARK}| )*")
_QUOTES = re.compile(r"[\"“”‘’「」『』《》【】()（）\[\]{}〈〉«»]")
_APOSTROPHE = re.compile(r"(?<=[A-Za-z])[’‘](?=[A-Za-z])")
# strongest first: what a run of marks is read as
_MARK_ORDER = (("?？", "?"), ("!！", "!"), ("。．.\n", "."), ("…", "…"), (";；", ";"), (":：", ":"),
               ("—", "—"), (",，、~～", ","))


@dataclass(frozen=True)
class Clause:
    """Text up to a punctuation mark; ``mark`` is the Kokoro symbol for it ("" at the very end)."""

    text: str
    punct: str = ""
    mark: str = ""
    ends_sentence: bool = False


def _mark_of(punct: str) -> str:
    for chars, mark in _MARK_ORDER:
        if any(c in chars for c in punct):
            return mark
    return ""


def split_clauses(text: str) -> list[Clause]:
    """Clauses of ``text`` in order; never returns a clause without speakable text."""
    text = _APOSTROPHE.sub("'", text)
    text = _QUOTES.sub(" ", text)
    text = re.sub(r"\.{2,}|。{2,}|‥+", "…", text)
    clauses: list[Clause] = []
    pos = 0
    for match in _PUNCT_RUN.finditer(text):
        body = text[pos:match.start()].strip()
        punct = match.group().strip(" ") or "\n"
        mark = _mark_of(punct)
        ends = any(c in _SENTENCE_MARKS for c in punct)
        if body:
            clauses.append(Clause(body, punct.replace("\n", ""), mark, ends))
        elif clauses:  # marks with nothing before them strengthen the previous clause
            last = clauses[-1]
            merged = last.punct + punct.replace("\n", "")
            clauses[-1] = Clause(last.text, merged, _mark_of(last.punct + punct), last.ends_sentence or ends)
        pos = match.end()
    tail = text[pos:].strip()
    if tail:
        clauses.append(Clause(tail))
    return clauses


def split_words(text: str, max_chars: int, tokenize: Callable[[str], list[str]]) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_chars`` characters at word boundaries.

    ``tokenize`` must return words whose concatenation is ``text`` (whitespace included). A single word
    longer than ``max_chars`` is cut inside the word, as a last resort.
    """
    if len(text) <= max_chars:
        return [text] if text.strip() else []
    pieces: list[str] = []
    current = ""
    for word in tokenize(text):
        while len(word) > max_chars:
            if current.strip():
                pieces.append(current.strip())
            current = ""
            pieces.append(word[:max_chars])
            word = word[max_chars:]
        if len(current) + len(word) > max_chars and current.strip():
            pieces.append(current.strip())
            current = ""
        current += word
    if current.strip():
        pieces.append(current.strip())
    return [p for p in pieces if p.strip()]


def whitespace_words(text: str) -> list[str]:
    """Words with their following whitespace ("a b " -> ["a ", "b "]); concatenation == text."""
    return re.findall(r"\s+|\S+\s*", text)


def script_words(text: str) -> list[str]:
    """For unspaced text (Japanese): cut where the kind of character changes (kanji/kana/other)."""
    def kind(ch: str) -> int:
        code = ord(ch)
        if 0x3040 <= code <= 0x309F:
            return 0
        if 0x30A0 <= code <= 0x30FF:
            return 1
        if ch.isspace():
            return 2
        return 3

    words: list[str] = []
    for ch in text:
        if words and kind(words[-1][-1]) == kind(ch):
            words[-1] += ch
        else:
            words.append(ch)
    return words
