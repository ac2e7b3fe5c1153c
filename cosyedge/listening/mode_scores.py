"""How close a speed mode's audio is to ``exact``'s on the same lines: the figures and the verdict.

The speed-mode check (``cosyedge.service.mode_check``) renders each line of a fixed set once in
``exact`` and once in a mode, with the same seed, and hands both renditions here. Each rendition is
heard once (:func:`hear_line`: the recognizer's text scored against the line) and embedded once by a
speaker judge; :func:`compare` then gives, mode against exact:

* **similarity**: the cosine of the judge's embeddings of the two renditions, averaged over lines
  (the judge is the model's own ``campplus.onnx`` where it ships one, else the project's d-vector,
  ``cosyedge.listening.speaker``; each has its own threshold, their scales differ);
* **intelligibility**: the share of the lines' units read right, ``100 * (1 - errors / units)``
  pooled over lines, for each rendition, and the difference mode minus exact in points. Units are
  pronunciation units where ``cosyedge.listening.intelligibility`` has them (zh toned syllables,
  ja kana, en words); other languages are scored by the recognizer's character (ko) or word error
  (de, es, fr, it, ru) after case and punctuation are dropped; a language neither covers is listed
  as not scored;
* **duration ratio** (mode over exact, whole set) and a **mel distance**: the mean RMS difference
  in dB of 80-bin log-mel frames along the DTW path between the two (0 for identical audio).

:class:`Thresholds` turns the figures into a verdict, "recommended on this model" or not, with a
code per failed rule; the numbers and the measurements they rest on are in docs/models.md.
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

#: Languages scored by the recognizer's character error (one unit per letter or syllable block).
CHARACTER_SCORED = ("ko",)
#: Languages scored by the recognizer's word error (lower case, punctuation dropped).
WORD_SCORED = ("de", "es", "fr", "it", "ru")
#: Languages scored by pronunciation units (``intelligibility.pronunciation``).
PRONUNCIATION_SCORED = ("zh", "en", "ja")
SCORED_LANGUAGES = PRONUNCIATION_SCORED + CHARACTER_SCORED + WORD_SCORED

JUDGE_CAMPPLUS = "campplus"
JUDGE_DVECTOR = "d-vector"

#: Recognizer: (audio, sample rate, language) -> the text it heard.
Hear = Callable[[np.ndarray, int, str], str]
#: Speaker judge: (audio, sample rate) -> embedding (any length; compared by cosine).
Embed = Callable[[np.ndarray, int], np.ndarray]

_MEL_RATE = 16000
_MEL_FFT = 512
_MEL_HOP = 320  # 20 ms: enough for a distance, and the DTW stays small
_MEL_BINS = 80


@dataclass(frozen=True)
class Heard:
    """One rendition heard against its line: ``errors`` over ``units`` by ``method``
    (``pronunciation``, ``characters``, ``words``); ``units`` 0 when the language is not scored."""

    errors: int
    units: int
    method: str
    text: str = ""


@dataclass
class Rendition:
    """One line rendered in one mode, with what the check learnt of it (filled once, reused by every
    comparison with it)."""

    text: str
    language: str
    audio: np.ndarray
    sample_rate: int
    embedding: np.ndarray | None = None
    heard: Heard | None = None
    _mel: np.ndarray | None = field(default=None, repr=False)

    @property
    def seconds(self) -> float:
        return float(np.asarray(self.audio).size) / float(self.sample_rate)

    def mel(self) -> np.ndarray:
        if self._mel is None:
            self._mel = log_mel_db(self.audio, self.sample_rate)
        return self._mel


def _plain_words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(ch)[0] in "PSZ" else ch for ch in text)
    return text.split()


def units(text: str, language: str) -> tuple[list[str], str]:
    """The units ``text`` is scored in for ``language`` and the method's name; ([], "not scored")
    for a language no method covers."""
    if language in PRONUNCIATION_SCORED:
        from cosyedge.listening.intelligibility import pronunciation

        return pronunciation(text, language), "pronunciation"
    if language in CHARACTER_SCORED:
        return [ch for ch in "".join(_plain_words(text))], "characters"
    if language in WORD_SCORED:
        return _plain_words(text), "words"
    return [], "not scored"


def score_heard(reference: str, heard: str, language: str) -> Heard:
    """``heard`` against ``reference`` in ``language``'s units."""
    from cosyedge.listening.intelligibility import edit_distance

    ref, method = units(reference, language)
    if not ref:
        return Heard(0, 0, method, heard)
    got, _ = units(heard, language)
    return Heard(edit_distance(ref, got), len(ref), method, heard)


def hear_line(rendition: Rendition, hear: Hear | None) -> Heard:
    """What the recognizer heard of one rendition, scored against its line (once per rendition)."""
    if rendition.heard is None:
        if hear is None or rendition.language not in SCORED_LANGUAGES:
            rendition.heard = Heard(0, 0, "not scored")
        else:
            audio = np.asarray(rendition.audio, dtype=np.float32)
            silent = audio.size == 0 or not np.isfinite(audio).all() or not np.abs(audio).max() > 0
            # nothing said is every unit missed (a render may end at once; the recognizer refuses it)
            text = "" if silent else hear(audio, rendition.sample_rate, rendition.language)
            rendition.heard = score_heard(rendition.text, text, rendition.language)
    return rendition.heard


def embed_line(rendition: Rendition, embed: Embed) -> np.ndarray:
    """The judge's embedding of one rendition (once per rendition)."""
    if rendition.embedding is None:
        rendition.embedding = np.asarray(embed(rendition.audio, rendition.sample_rate), dtype=np.float32).reshape(-1)
    return rendition.embedding


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two embeddings (1.0 for identical ones)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def log_mel_db(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """[frames, 80] log-mel power in dB of mono audio (16 kHz, 32 ms window, 20 ms hop)."""
    import soxr

    from cosyedge.listening.speaker import mel_filterbank

    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if sample_rate != _MEL_RATE:
        x = soxr.resample(x, sample_rate, _MEL_RATE).astype(np.float32)
    if x.size < _MEL_FFT:
        x = np.pad(x, (0, _MEL_FFT - x.size))
    frames = np.lib.stride_tricks.sliding_window_view(x, _MEL_FFT)[::_MEL_HOP]
    power = np.abs(np.fft.rfft(frames * np.hanning(_MEL_FFT).astype(np.float32), axis=1)) ** 2
    return 10.0 * np.log10(power @ mel_filterbank(_MEL_RATE, _MEL_FFT, _MEL_BINS).T + 1e-8)


def dtw_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Mean frame distance (RMS over bins) along the cheapest monotonic alignment of ``a`` and ``b``."""
    cost = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).mean(axis=2))
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        row = cost[i - 1]
        diagonal_or_up = np.minimum(total[i - 1, 1:], total[i - 1, :-1]) + row
        current = total[i]
        for j in range(1, m + 1):
            left = current[j - 1] + row[j - 1]
            current[j] = diagonal_or_up[j - 1] if diagonal_or_up[j - 1] < left else left
    i, j, steps, spent = n, m, 0, 0.0
    while i > 0 and j > 0:
        spent += cost[i - 1, j - 1]
        steps += 1
        moves = (total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])
        best = int(np.argmin(moves))
        i, j = (i - 1, j - 1) if best == 0 else (i - 1, j) if best == 1 else (i, j - 1)
    return spent / max(1, steps)


def mel_distance(a: Rendition, b: Rendition) -> float:
    """dB between two renditions' log-mels along their DTW alignment (0 for identical audio)."""
    return dtw_distance(a.mel(), b.mel())


@dataclass(frozen=True)
class LanguageFigures:
    """One language's share of a comparison (``units`` 0: not scored)."""

    lines: int
    similarity: float
    exact_errors: int
    mode_errors: int
    units: int
    method: str


@dataclass(frozen=True)
class ModeFigures:
    """A mode against exact over the whole line set (see the module doc for each figure)."""

    similarity: float
    min_similarity: float
    intelligibility_exact: float | None
    intelligibility_mode: float | None
    duration_ratio: float
    mel_distance_db: float
    languages: dict[str, LanguageFigures]

    @property
    def intelligibility_delta(self) -> float | None:
        """Mode minus exact, in points (negative: the mode is heard worse)."""
        if self.intelligibility_exact is None or self.intelligibility_mode is None:
            return None
        return round(self.intelligibility_mode - self.intelligibility_exact, 2)

    @property
    def extra_errors(self) -> int:
        """The mode's errors less exact's, over every scored unit."""
        return sum(f.mode_errors - f.exact_errors for f in self.languages.values())

    @property
    def not_scored(self) -> list[str]:
        """Languages rendered but not scored for intelligibility."""
        return sorted(lang for lang, figures in self.languages.items() if not figures.units)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["intelligibility_delta"] = self.intelligibility_delta
        out["extra_errors"] = self.extra_errors
        out["not_scored"] = self.not_scored
        return out


def _percent(errors: int, total: int) -> float | None:
    return round(100.0 * (1.0 - errors / total), 2) if total else None


def compare(exact: Sequence[Rendition], mode: Sequence[Rendition], embed: Embed,
            hear: Hear | None) -> ModeFigures:
    """A mode's renditions against exact's, line by line (same lines in the same order)."""
    if len(exact) != len(mode) or not exact:
        raise ValueError(f"compare needs the same non-empty line set ({len(exact)} exact, {len(mode)} mode)")
    per_language: dict[str, list[tuple[float, Heard, Heard]]] = {}
    similarities: list[float] = []
    distances: list[float] = []
    for ref, got in zip(exact, mode):
        if (ref.text, ref.language) != (got.text, got.language):
            raise ValueError(f"line {ref.text!r} ({ref.language}) was compared with {got.text!r}")
        similarity = cosine(embed_line(ref, embed), embed_line(got, embed))
        similarities.append(similarity)
        distances.append(mel_distance(ref, got))
        per_language.setdefault(ref.language, []).append((similarity, hear_line(ref, hear), hear_line(got, hear)))
    languages = {}
    for language, rows in per_language.items():
        languages[language] = LanguageFigures(
            lines=len(rows), similarity=round(float(np.mean([r[0] for r in rows])), 4),
            exact_errors=sum(r[1].errors for r in rows), mode_errors=sum(r[2].errors for r in rows),
            units=sum(r[1].units for r in rows), method=rows[0][1].method)
    exact_errors = sum(f.exact_errors for f in languages.values())
    mode_errors = sum(f.mode_errors for f in languages.values())
    total = sum(f.units for f in languages.values())
    exact_seconds = sum(r.seconds for r in exact)
    return ModeFigures(
        similarity=round(float(np.mean(similarities)), 4), min_similarity=round(float(np.min(similarities)), 4),
        intelligibility_exact=_percent(exact_errors, total), intelligibility_mode=_percent(mode_errors, total),
        duration_ratio=round(sum(r.seconds for r in mode) / exact_seconds, 4) if exact_seconds else 0.0,
        mel_distance_db=round(float(np.mean(distances)), 3), languages=languages)


@dataclass(frozen=True)
class Verdict:
    """``recommended`` when every rule holds; ``failed`` names the rules that did not (codes:
    ``similarity_low``, ``intelligibility_drop``, ``exact_not_heard``, ``intelligibility_not_scored``)."""

    recommended: bool
    failed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"recommended": self.recommended, "failed": list(self.failed)}


#: docs/models.md ("The speed-mode check") gives the measurements behind each number. The d-vector's
#: is measured (bench/mode_check_evidence.py); campplus's comes from upstream's reported CAM++
#: same/different-speaker score ranges, not measured here: no real CAM++ weights are on this box.
DEFAULT_MIN_SIMILARITY = {JUDGE_CAMPPLUS: 0.90, JUDGE_DVECTOR: 0.85}
DEFAULT_MAX_DROP_POINTS = 2.0
#: Fewer extra errors than this are the recognizer's noise, whatever the points (one English word
#: of a 33-word set is 3 points; a low-passed, noisier copy of the same audio flips one).
DEFAULT_MIN_DROP_UNITS = 3
#: Below this share of exact's units heard right, the recognizer cannot vouch for any mode.
DEFAULT_MIN_EXACT_HEARD = 50.0


@dataclass(frozen=True)
class Thresholds:
    """The verdict's rules: similarity to exact at least ``min_similarity[judge]``; exact itself heard
    (at least ``min_exact_heard`` % of its units right); and intelligibility not worse than exact's by
    more than ``max_drop_points``, counting a drop only from ``min_drop_units`` extra errors on."""

    min_similarity: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIN_SIMILARITY))
    max_drop_points: float = DEFAULT_MAX_DROP_POINTS
    min_drop_units: int = DEFAULT_MIN_DROP_UNITS
    min_exact_heard: float = DEFAULT_MIN_EXACT_HEARD

    def judge(self, figures: ModeFigures, judge: str) -> Verdict:
        failed = []
        if figures.similarity < self.min_similarity[judge]:
            failed.append("similarity_low")
        delta = figures.intelligibility_delta
        if delta is None or figures.intelligibility_exact is None:
            failed.append("intelligibility_not_scored")
        elif figures.intelligibility_exact < self.min_exact_heard:
            failed.append("exact_not_heard")
        elif delta < -self.max_drop_points and figures.extra_errors >= self.min_drop_units:
            failed.append("intelligibility_drop")
        return Verdict(not failed, tuple(failed))

    def as_dict(self) -> dict[str, Any]:
        return {"min_similarity": dict(self.min_similarity), "max_drop_points": self.max_drop_points,
                "min_drop_units": self.min_drop_units, "min_exact_heard": self.min_exact_heard}
