"""Approximate voice match for the embedded Kokoro engine, which cannot clone.

What it does, honestly: it looks for the Kokoro style pack whose voice sounds most like the prompt to a
speaker encoder (``cosyedge.listening.speaker``), among blends of the five bundled packs. Kokoro's 256-d style
vector has two halves: the first 128 values drive the decoder (timbre), the last 128 the prosody
predictor (pitch contour, durations, energy). The search space is therefore two blend weight vectors
over the packs, one per half, which lets it mix one pack's timbre with another's pitch, with a small
extrapolation (weights down to ``-EXTRAPOLATE``) to move a little beyond the packs. Pitch is adapted
through the prosody half: the prompt's median F0 picks the two packs that bracket it and their blend
(F0 moves almost linearly in log F0 along such a blend); no audio is pitch-shifted afterwards.

Each candidate is scored by synthesizing one fixed probe sentence, embedding it, and taking the cosine
similarity to the prompt's embedding minus a penalty for artefacts (clipping, a raised noise floor,
a probe whose length drifts from the presets', a sign of broken prosody). The search tries a few
structured candidates first (the least-squares blend of pack embeddings, the best pack, the best two,
each with the pitch-matched prosody), then runs a seeded (1+1) evolution strategy on the weights,
bounded by a number of probes and a deadline. Pack and preset probes are memoized on the engine.
Every preset is a candidate, so the result is never scored below the nearest preset.

After the search, the adaptations of ``adapt`` (formant warp, pitch range, long-term spectrum
equalizer) are tuned on the search's probe audio (the estimates from the prompt and a small grid
around them, by similarity), and the final voice is chosen on two check lines that neither the
search nor the tuning heard (``CHECK_LINES``), among the best of the five presets, the search result
and the best adapted variant of each method (:func:`final_choice`): an adaptation that does not
raise the similarity there is not applied, nor one that the listening check hears read a language
worse (:func:`guard_reading`, called by the engine after its check).

The result is a VoicePrompt with ``arrays["style"]`` ([510, 1, 256]) and meta saying "approximate voice
match", the similarity before (nearest preset) and after, the blend, ``stages`` (the check-line
similarity of each stage and which one was kept) and ``adaptation`` when one is applied. It is cached
by the prompt cache like any encoded prompt.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge.engines.base import VoicePrompt
from cosyedge.engines.kokoro import adapt, presets
from cosyedge.engines.kokoro.silence import trim_silence
from cosyedge.errors import CancelledError
from cosyedge.listening.speaker import SpeakerEncoder, cosine, shared_encoder

logger = logging.getLogger(__name__)

METHOD = "approximate voice match"
#: Two short probe sentences in Kokoro phonemes, Japanese ("Let's walk in the park together.") and
#: English ("It is warm in here today."), about 2 s each: each probe costs about 2 s on 2 cores.
#: One sentence alone (first version) gave an objective that did not carry over to other text; two
#: languages make the probe embedding less tied to one sentence (the bench measures held-out text).
PROBE_PHONEMES = ("iʔɕoɲi koːeɴ o sampo ɕi maɕoː.", "ɪT ɪz wˈɔɹm ɪn hˈɪɹ tədˈA.")
#: The lines the final choice is made on (language, text): heard by no search probe and no tuning
#: step, and not among the bench's held-out sentences or the listening check's guard lines.
CHECK_LINES = (("ja", "きのうは友だちと駅まで歩きました。"), ("en", "We will meet at the library after lunch."))
#: STFT warps tried on the probe audio besides the envelope estimate (cheap: the warp runs at ~1 %
#: of real time, an embedding at ~3 %). A fixed grid as well, because the estimate from a prompt
#: made by another kind of synthesizer often sits at the edge of WARP_RANGE while both speaker
#: encoders of the bench peak within ±6 % (docs/bench-log/asr-and-voices.md, "Voice match adaptation").
WARP_GRID = (0.94, 0.97, 1.0, 1.03, 1.06)
#: An adaptation must beat the unadapted search result on the check lines by this much to be kept.
ADAPT_MARGIN = 0.005
TIMBRE_DIMS = slice(0, 128)
PROSODY_DIMS = slice(128, 256)
EXTRAPOLATE = 0.25
_MEMO_ATTR = "_voice_match_pack_scores"
#: Pack and preset probe results stored by scripts/make_probe_table.py (7 KB; used when it matches).
PROBE_TABLE = Path(__file__).with_name("probe_table.npz")


@dataclass(frozen=True)
class MatchBudget:
    """How much search a new voice may cost: ``max_evals`` search probes, and no new probe starts
    after ``deadline_s`` of wall time from the start (pack/preset probes included, so the first voice
    of a process, which pays for them, stays within the same time)."""

    max_evals: int = 12
    deadline_s: float = 26.0
    step: float = 0.35
    seed: int = 0


@dataclass
class Candidate:
    timbre: np.ndarray  # weights over the packs for dims 0-127
    prosody: np.ndarray  # weights over the packs for dims 128-255
    similarity: float = -1.0
    penalty: float = 0.0
    audio: np.ndarray | None = None  # the probe audio (kept for the adaptation tuning)

    @property
    def score(self) -> float:
        return self.similarity - self.penalty


def blend_pack(packs: list[np.ndarray], timbre: np.ndarray, prosody: np.ndarray) -> np.ndarray:
    """One [510, 1, 256] pack: timbre half and prosody half each a weighted sum of the packs."""
    stack = np.stack(packs).astype(np.float32)  # [P, 510, 1, 256]
    out = np.empty_like(stack[0])
    out[..., TIMBRE_DIMS] = np.tensordot(timbre, stack[..., TIMBRE_DIMS], axes=1)
    out[..., PROSODY_DIMS] = np.tensordot(prosody, stack[..., PROSODY_DIMS], axes=1)
    return out


def level_gap_db(audio: np.ndarray, sample_rate: int) -> float:
    """Distance in dB between loud speech (95th percentile of 20 ms frames) and the quiet frames
    (10th percentile): small when a hiss or buzz fills the pauses."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    frame = int(0.02 * sample_rate)
    n = x.size // frame
    if n < 2:
        return 0.0
    db = 10 * np.log10(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1) + 1e-12)
    return float(np.percentile(db, 95) - np.percentile(db, 10))


def artefact_penalty(audio: np.ndarray, sample_rate: int, expected_s: float | None,
                     reference_gap_db: float = 45.0) -> float:
    """0 for a probe as clean as the bundled packs'; grows with clipping, with a noise floor that
    rises above theirs (``reference_gap_db``, their median level gap, less 3 dB of slack) and with a
    duration more than 25 % away from theirs (a sign the prosody half broke)."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    if x.size < sample_rate // 4 or not np.isfinite(x).all():
        return 1.0
    penalty = 5.0 * float(np.mean(np.abs(x) >= 0.99))
    penalty += 0.01 * max(0.0, reference_gap_db - 3.0 - level_gap_db(x, sample_rate))
    if expected_s:
        drift = abs(x.size / sample_rate - expected_s) / expected_s
        penalty += 0.5 * max(0.0, drift - 0.25)
    return penalty


class _Scorer:
    """Synthesizes the probe with a pack and scores it against the prompt embedding."""

    def __init__(self, engine: Any, encoder: SpeakerEncoder, target: np.ndarray) -> None:
        self.engine = engine
        self.encoder = encoder
        self.target = target
        self.ids = [engine.frontend.token_ids(p) for p in PROBE_PHONEMES]
        self.rate = engine.capabilities.sample_rate
        self.evals = 0

    def probe(self, pack: np.ndarray) -> np.ndarray:
        self.evals += 1
        pieces = [trim_silence(self.engine.infer(ids, pack, 1.0), self.rate) for ids in self.ids]
        return np.concatenate(pieces)

    def embed(self, audio: np.ndarray) -> np.ndarray:
        return self.encoder.embed(audio, self.rate)


@dataclass(frozen=True)
class PackProbe:
    embedding: np.ndarray
    seconds: float
    f0: float  # median F0 of the probe, Hz (nan when unvoiced)
    gap_db: float  # level_gap_db of the probe


def median_f0(audio: np.ndarray, sample_rate: int) -> float:
    """Median F0 (Hz, 60-600) over loud, clearly periodic frames; nan when there are none.

    Normalized autocorrelation per 64 ms frame at 16 kHz; the shortest lag whose peak reaches 85 %
    of the best one is taken, which avoids octave-down errors. Plain numpy: no librosa import.
    """
    import soxr

    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    rate = 16000
    if sample_rate != rate:
        x = soxr.resample(x, sample_rate, rate).astype(np.float32)
    frame, hop = 1024, 256
    if x.size < frame:
        return float("nan")
    frames = np.lib.stride_tricks.sliding_window_view(x, frame)[::hop].astype(np.float64)
    frames = frames - frames.mean(axis=1, keepdims=True)
    energy = np.sum(frames ** 2, axis=1)
    loud = energy > 0.1 * energy.max() if energy.max() > 0 else np.zeros(energy.size, bool)
    frames = frames[loud] * np.hanning(frame)
    if not frames.size:
        return float("nan")
    spec = np.fft.rfft(frames, n=2 * frame, axis=1)
    acf = np.fft.irfft(np.abs(spec) ** 2, axis=1)[:, :frame]
    acf /= acf[:, :1] + 1e-12
    lo, hi = rate // 600, rate // 60
    window = acf[:, lo:hi]
    best = window.max(axis=1)
    f0 = []
    for row, peak in zip(window, best):
        if peak < 0.5:
            continue  # not periodic enough: unvoiced or noise
        lag = int(np.flatnonzero(row >= 0.85 * peak)[0])
        while lag + 1 < row.size and row[lag + 1] > row[lag]:  # climb to the local maximum
            lag += 1
        f0.append(rate / (lo + lag))
    return float(np.median(f0)) if f0 else float("nan")


def probes_fingerprint(engine: Any) -> str:
    """What the pack/preset probe results depend on: the packs, the presets, the probe text and the
    speaker encoder file. A stored table is used only when this matches."""
    import hashlib

    from cosyedge.listening.speaker import encoder_path

    h = hashlib.sha256(json.dumps({"version": 2, "probe": PROBE_PHONEMES, "check": CHECK_LINES,
                                   "recipes": repr(presets.LANGUAGE_RECIPES), "presets": presets.PRESETS,
                                   "model": engine.model_id, "encoder_bytes": encoder_path().stat().st_size},
                                  sort_keys=True).encode())
    for name in sorted(engine.packs):
        h.update(name.encode())
        h.update(np.ascontiguousarray(engine.packs[name], dtype="<f4").tobytes())
    return h.hexdigest()


def save_probe_table(engine: Any, path: Path = PROBE_TABLE) -> Path:
    """Probe every pack and blended preset now and store the results (``scripts/make_probe_table.py``),
    so a fresh process skips those probes (about 12 s on 2 cores) when the fingerprint matches."""
    scorer = _Scorer(engine, shared_encoder(), np.zeros(256, np.float32))
    engine.__dict__.pop(_MEMO_ATTR, None)
    names = sorted(engine.packs)
    memo = _pack_probes(scorer, names, use_table=False)
    _preset_probes(scorer, names, [engine.packs[n] for n in names])
    _preset_checks(scorer)
    arrays = {f"{key}/{field}": np.asarray(getattr(probe, field), dtype=np.float32)
              for key, probe in memo.items() for field in PackProbe.__dataclass_fields__}
    arrays["fingerprint"] = np.frombuffer(probes_fingerprint(engine).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    return path


def load_probe_table(engine: Any, path: Path = PROBE_TABLE) -> dict[str, PackProbe]:
    """The stored probe table, or {} when absent, unreadable or made for other packs/encoder/probe."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            if bytes(npz["fingerprint"]).decode() != probes_fingerprint(engine):
                logger.info("probe table %s does not match this model; probing the packs", path.name)
                return {}
            keys = {k.rsplit("/", 1)[0] for k in npz.files if "/" in k}
            return {key: PackProbe(*(npz[f"{key}/{f}"].item() if npz[f"{key}/{f}"].ndim == 0
                                     else npz[f"{key}/{f}"] for f in PackProbe.__dataclass_fields__))
                    for key in keys}
    except (OSError, KeyError, ValueError) as exc:
        logger.info("no usable probe table (%s); probing the packs", exc)
        return {}


def _pack_probes(scorer: _Scorer, names: list[str], use_table: bool = True) -> dict[str, PackProbe]:
    """Embedding, duration and F0 of the probe for each bundled pack, memoized on the engine object
    (they depend only on the model, and cost one synthesis each); a matching stored table
    (``PROBE_TABLE``) fills the memo without probing."""
    memo: dict[str, PackProbe] = scorer.engine.__dict__.setdefault(_MEMO_ATTR, {})
    if use_table and not memo:
        memo.update(load_probe_table(scorer.engine))
    for name in names:
        if name not in memo:
            audio = scorer.probe(scorer.engine.packs[name])
            memo[name] = PackProbe(scorer.embed(audio), audio.size / scorer.rate,
                                   median_f0(audio, scorer.rate), level_gap_db(audio, scorer.rate))
    return memo


def _preset_probes(scorer: _Scorer, names: list[str], packs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Probe embedding of each preset: single packs from the pack memo, blends probed once and
    memoized as ``preset:<name>``."""
    memo = scorer.engine.__dict__[_MEMO_ATTR]
    out = {}
    for preset, weights in presets.PRESETS.items():
        if len(weights) == 1:
            out[preset] = memo[next(iter(weights))].embedding
            continue
        key = f"preset:{preset}"
        if key not in memo:
            w = preset_weights(names, preset)
            audio = scorer.probe(blend_pack(packs, w, w))
            memo[key] = PackProbe(scorer.embed(audio), audio.size / scorer.rate,
                                  median_f0(audio, scorer.rate), level_gap_db(audio, scorer.rate))
        out[preset] = memo[key].embedding
    return out


def _speak_check(scorer: _Scorer, pack_for: Callable[[str], np.ndarray]) -> np.ndarray:
    """The check lines, each read with ``pack_for(language)``, edges trimmed, joined."""
    pieces = []
    for language, text in CHECK_LINES:
        for sentence in scorer.engine.frontend.sentences(text, language):
            ids = scorer.engine.frontend.token_ids(sentence.phonemes)
            pieces.append(trim_silence(scorer.engine.infer(ids, pack_for(language), 1.0), scorer.rate))
    scorer.evals += 1
    return np.concatenate(pieces)


def _preset_checks(scorer: _Scorer) -> dict[str, np.ndarray]:
    """Embedding of each preset reading the check lines (with its recipe per language, as a request
    would hear it), memoized on the engine as ``check:<name>`` (and stored in the probe table)."""
    memo = scorer.engine.__dict__.setdefault(_MEMO_ATTR, {})
    out = {}
    for preset in presets.PRESETS:
        key = f"check:{preset}"
        if key not in memo:
            audio = _speak_check(scorer, lambda lang, p=preset: presets.preset_pack(scorer.engine.packs, p, lang))
            memo[key] = PackProbe(scorer.embed(audio), audio.size / scorer.rate,
                                  median_f0(audio, scorer.rate), level_gap_db(audio, scorer.rate))
        out[preset] = memo[key].embedding
    return out


def tune_adaptations(scorer: _Scorer, prompt: np.ndarray, prompt_rate: int,
                     probe_audio: np.ndarray) -> list[tuple[adapt.Adaptation, float]]:
    """For each adaptation method, the variant that scores best on the search's own probe audio:
    STFT: the envelope's warp estimate and WARP_GRID, each without and with the full equalizer,
    then the best one's half equalizer; WORLD (about ten times dearer): its estimate (warp, F0
    range, equalizer) only. Returns (adaptation, probe similarity) per method whose best variant
    beats the plain probe audio, best first; identities left out."""
    plain = cosine(scorer.target, scorer.embed(probe_audio))
    target_spectrum = adapt.long_term_spectrum(prompt, prompt_rate)
    found = []

    def score(variants) -> list[tuple[adapt.Adaptation, float]]:
        out = []
        for variant in variants:
            if not variant.is_identity:
                audio = adapt.apply(probe_audio, scorer.rate, variant)
                out.append((variant, cosine(scorer.target, scorer.embed(audio))))
        return out

    for method in adapt.METHODS:
        estimate = adapt.estimate(prompt, prompt_rate, probe_audio, scorer.rate, method)
        if method == "world":  # WORLD resynthesis is ~10x dearer: the estimate only
            scored = score({estimate})
        else:  # warps with and without the equalizer, then the best warp's half equalizer
            scored = score({adapt.with_eq(replace(estimate, warp=warp), target_spectrum, probe_audio,
                                          scorer.rate, strength)
                            for warp in {estimate.warp, *WARP_GRID} for strength in (0.0, 1.0)})
            if scored:
                top = max(scored, key=lambda item: item[1])[0]
                scored += score({adapt.with_eq(top, target_spectrum, probe_audio, scorer.rate, 0.5)})
        best = max(scored, key=lambda item: item[1], default=None)
        if best is not None and best[1] > plain:
            found.append(best)
    return sorted(found, key=lambda item: -item[1])


def final_choice(scorer: _Scorer, prompt: np.ndarray, prompt_rate: int, best: Candidate,
                 packs: list[np.ndarray]) -> tuple[str, dict[str, Any], adapt.Adaptation | None]:
    """The voice kept, judged on the check lines: the best preset there, the search result, or the
    search result with its best adaptation (only when it beats the plain result by ADAPT_MARGIN).
    Returns (kept stage, stages for the meta, adaptation or None)."""
    checks = _preset_checks(scorer)
    preset_sims = {name: cosine(scorer.target, emb) for name, emb in checks.items()}
    best_preset = max(preset_sims, key=preset_sims.get)
    style = blend_pack(packs, best.timbre, best.prosody)
    check_audio = _speak_check(scorer, lambda _lang: style)
    search_sim = cosine(scorer.target, scorer.embed(check_audio))
    stages: dict[str, Any] = {"preset": {"name": best_preset, "similarity": round(preset_sims[best_preset], 4)},
                              "search": {"similarity": round(search_sim, 4)}}
    chosen, sim, adaptation = "search", search_sim, None
    probe_audio = best.audio if best.audio is not None else scorer.probe(style)
    tried = []
    for variant, probe_sim in tune_adaptations(scorer, prompt, prompt_rate, probe_audio):
        adapted_sim = cosine(scorer.target, scorer.embed(adapt.apply(check_audio, scorer.rate, variant)))
        tried.append({**variant.to_meta(), "probe_similarity": round(probe_sim, 4),
                      "similarity": round(adapted_sim, 4)})
        if adapted_sim > sim + (ADAPT_MARGIN if adaptation is None else 0.0):
            chosen, sim, adaptation = "adapted", adapted_sim, variant
    stages["adapted"] = tried
    if preset_sims[best_preset] > sim:
        chosen, adaptation = "preset", None
    stages["kept"] = chosen
    if adaptation is None:
        stages["adaptation_skipped"] = "no_gain" if tried else "identity"
    return chosen, stages, adaptation


def preset_weights(names: list[str], preset: str) -> np.ndarray:
    weights = presets.PRESETS[preset]
    w = np.array([weights.get(n, 0.0) for n in names], dtype=np.float64)
    return w / w.sum()


def _initial_weights(embeddings: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Convex weights whose mix of pack embeddings is closest to the target (a first guess: the
    embedding is not linear in the style, so the search refines it)."""
    from scipy.optimize import nnls

    rows = np.vstack([embeddings.T, 3.0 * np.ones(len(embeddings))])
    weights, _ = nnls(rows, np.concatenate([target, [3.0]]))
    total = weights.sum()
    return weights / total if total > 0 else np.full(len(embeddings), 1.0 / len(embeddings))


def pitch_weights(pack_f0: np.ndarray, target_f0: float) -> np.ndarray | None:
    """Prosody weights over two packs whose blend should speak at ``target_f0``.

    F0 is set by the prosody half only and moves almost linearly in log F0 along a blend of two
    packs (measured: jf_alpha 277 Hz -> jm_kumo 92 Hz gives 222/177/136 Hz at 25/50/75 %). The
    two packs bracketing the target are interpolated; outside the packs' range the nearest two are
    extrapolated by at most EXTRAPOLATE.
    """
    ok = np.flatnonzero(np.isfinite(pack_f0) & (pack_f0 > 0))
    if not np.isfinite(target_f0) or target_f0 <= 0 or ok.size < 2:
        return None
    logs = np.log(pack_f0[ok])
    order = ok[np.argsort(logs)]
    logs = np.sort(logs)
    t = np.log(target_f0)
    i = int(np.clip(np.searchsorted(logs, t), 1, logs.size - 1))
    lo, hi = order[i - 1], order[i]
    frac = (t - logs[i - 1]) / max(logs[i] - logs[i - 1], 1e-6)
    frac = float(np.clip(frac, -EXTRAPOLATE, 1.0 + EXTRAPOLATE))
    w = np.zeros(pack_f0.size)
    w[lo], w[hi] = 1.0 - frac, frac
    return w


def project(w: np.ndarray) -> np.ndarray:
    """The nearest weights that sum to 1 with every weight in [-EXTRAPOLATE, 1 + EXTRAPOLATE]
    (alternating clip and an even shift; converges in a few rounds), so a blend never leaves the
    neighbourhood of the packs, where Kokoro's output stays clean."""
    w = np.asarray(w, dtype=np.float64).copy()
    for _ in range(50):
        w = np.clip(w, -EXTRAPOLATE, 1.0 + EXTRAPOLATE)
        gap = 1.0 - w.sum()
        if abs(gap) < 1e-9:
            break
        free = (w > -EXTRAPOLATE) if gap < 0 else (w < 1.0 + EXTRAPOLATE)
        w[free] += gap / max(int(free.sum()), 1)
    return w


def _propose(best: Candidate, rng: np.random.Generator, step: float) -> Candidate:
    """Perturb the timbre weights (and, a third of the time, the prosody weights a little)."""
    prosody = best.prosody.copy()
    if rng.random() < 1 / 3:
        prosody = project(prosody + rng.normal(0.0, step / 3, prosody.size))
    return Candidate(timbre=project(best.timbre + rng.normal(0.0, step, best.timbre.size)), prosody=prosody)


def _schedule(sims: np.ndarray, guess: np.ndarray, pitch: np.ndarray | None) -> list[Candidate]:
    """Structured first candidates, most promising first: the NNLS guess and the best packs' timbre,
    each with the pitch-matched prosody (or, without a usable F0, their own prosody)."""
    order = np.argsort(-sims)
    one_hot = np.eye(sims.size)
    top, second = one_hot[order[0]], one_hot[order[1]]
    pair = 0.5 * (top + second)
    out = []
    for timbre in (guess, top, pair):
        out.append(Candidate(timbre=timbre.copy(), prosody=(pitch if pitch is not None else timbre).copy()))
    if pitch is None:
        out.append(Candidate(timbre=top.copy(), prosody=second.copy()))
    return out


def match_voice(engine: Any, audio: np.ndarray, sample_rate: int, transcript: str | None, *,
                encoder: SpeakerEncoder | None = None, budget: MatchBudget | None = None,
                cancelled: Callable[[], bool] | None = None) -> VoicePrompt:
    """Find the blend of the engine's packs that sounds most like ``audio``; see the module doc.
    Raises CancelledError between probes once ``cancelled()`` (the job's Cancel: the search takes
    seconds, and nothing half-searched is returned or cached)."""
    started = time.monotonic()
    budget = budget or MatchBudget()
    encoder = encoder or shared_encoder()
    target = encoder.embed(audio, sample_rate)
    target_f0 = median_f0(audio, sample_rate)
    scorer = _Scorer(engine, encoder, target)
    names = sorted(engine.packs)
    packs = [engine.packs[n] for n in names]
    probes = _pack_probes(scorer, names)
    pack_emb = np.stack([probes[n].embedding for n in names])
    sims = pack_emb @ target
    expected_s = float(np.median([probes[n].seconds for n in names]))
    reference_gap = float(np.median([probes[n].gap_db for n in names]))

    def evaluate(cand: Candidate) -> Candidate:
        out = scorer.probe(blend_pack(packs, cand.timbre, cand.prosody))
        cand.similarity = cosine(target, scorer.embed(out))
        cand.penalty = artefact_penalty(out, scorer.rate, expected_s, reference_gap)
        cand.audio = out
        logger.debug("probe %d: similarity %.3f penalty %.3f timbre %s prosody %s", scorer.evals,
                     cand.similarity, cand.penalty, np.round(cand.timbre, 2), np.round(cand.prosody, 2))
        return cand

    # The presets: single packs come from the memo; blended presets are probed once and memoized too.
    preset_scores = {}
    for preset, embedding in _preset_probes(scorer, names, packs).items():
        w = preset_weights(names, preset)
        preset_scores[preset] = Candidate(timbre=w, prosody=w.copy(), similarity=cosine(target, embedding))
    nearest = max(preset_scores, key=lambda p: preset_scores[p].similarity)
    best = max(preset_scores.values(), key=lambda c: c.score)

    def within_budget(n: int) -> bool:
        if cancelled is not None and cancelled():
            raise CancelledError(f"cancelled while preparing the voice (after {n} probes)")
        return n < budget.max_evals and time.monotonic() - started < budget.deadline_s

    pitch = pitch_weights(np.array([probes[n].f0 for n in names]), target_f0)
    tried: list[Candidate] = []
    for cand in _schedule(sims, _initial_weights(pack_emb, target), pitch):
        if not within_budget(len(tried)):
            break
        tried.append(evaluate(cand))
    rng = np.random.default_rng(budget.seed)
    step = budget.step
    while within_budget(len(tried)):
        parent = max([best, *tried], key=lambda c: c.score)
        cand = evaluate(_propose(parent, rng, step))
        tried.append(cand)
        step = min(0.6, step * 1.3) if cand.score > parent.score else max(0.05, step * 0.8)
    best = max([best, *tried], key=lambda c: c.score)
    search_probes = scorer.evals
    final_started = time.monotonic()
    kept, stages, adaptation = final_choice(scorer, audio, sample_rate, best, packs)
    stages["seconds"] = round(time.monotonic() - final_started, 2)
    stages["calls"] = scorer.evals - search_probes  # check-line readings (and a re-probe of a preset)
    style = blend_pack(packs, best.timbre, best.prosody)
    if kept == "preset":
        name = stages["preset"]["name"]
        style = presets.preset_pack(engine.packs, name)

    before = preset_scores[nearest].similarity
    seconds = time.monotonic() - started
    logger.info("%s: similarity %.3f (nearest preset %s) -> %.3f in %d probes, %.1f s; check lines: %s",
                METHOD, before, nearest, best.similarity, scorer.evals, seconds, stages)
    meta = {"method": METHOD, "similarity_before": round(before, 4),
            "similarity_after": round(best.similarity, 4), "nearest_preset": nearest,
            "prompt_f0_hz": None if not np.isfinite(target_f0) else round(target_f0, 1),
            "timbre_weights": {n: round(float(w), 4) for n, w in zip(names, best.timbre)},
            "prosody_weights": {n: round(float(w), 4) for n, w in zip(names, best.prosody)},
            "artefact_penalty": round(best.penalty, 4), "probes": search_probes,
            "seconds": round(seconds, 2), "transcript": transcript or "", "stages": stages}
    if kept == "preset":
        meta["preset_voice"] = stages["preset"]["name"]  # read with the preset's own recipe per language
    if adaptation is not None:
        meta["adaptation"] = adaptation.to_meta()
    return VoicePrompt(engine=engine.name, model_id=engine.model_id, arrays={"style": style}, meta=meta)


def without_adaptation(prompt: VoicePrompt, reason: str) -> VoicePrompt:
    """The voice the final choice keeps without an adaptation (``reason`` recorded in its stages):
    the search result, or the best preset where that scored higher on the check lines."""
    meta = {k: v for k, v in prompt.meta.items() if k != "adaptation"}
    stages = dict(meta.get("stages") or {})
    kept = "search"
    if stages and stages["preset"]["similarity"] > stages["search"]["similarity"]:
        kept = "preset"
        meta["preset_voice"] = stages["preset"]["name"]
    stages.update(kept=kept, adaptation_skipped=reason)
    meta["stages"] = stages
    return VoicePrompt(engine=prompt.engine, model_id=prompt.model_id, arrays=dict(prompt.arrays), meta=meta)


#: An adapted voice may read a language at most this much worse (error rate) than without it.
READING_TOLERANCE = 0.02


def guard_reading(engine: Any, prompt: VoicePrompt, cancelled: Callable[[], bool] | None = None) -> VoicePrompt:
    """The listening check as the adaptation's guard: when ``prompt`` (already checked, its
    ``reading_errors`` set) carries an adaptation, the same voice without it is checked too, and
    the adaptation is dropped when it reads any language more than READING_TOLERANCE worse."""
    adapted = prompt.meta.get("reading_errors") or {}
    if "adaptation" not in prompt.meta or not adapted:
        return prompt
    plain = without_adaptation(prompt, "reads_worse")
    plain_errors = engine.reading_errors(plain, cancelled)
    prompt.meta.setdefault("stages", {})["reading_errors_unadapted"] = plain_errors
    worse = [lang for lang, rate in adapted.items() if rate > plain_errors.get(lang, rate) + READING_TOLERANCE]
    if not worse:
        return prompt
    logger.info("adaptation dropped: it reads %s worse (%s vs %s)", worse, adapted, plain_errors)
    if plain.meta["stages"]["kept"] == "preset":  # the plain search was not the voice kept: hear the preset
        plain_errors = engine.reading_errors(plain, cancelled)
    plain.meta["reading_errors"] = plain_errors
    plain.meta["stages"]["reading_errors_adapted"] = adapted
    plain.meta["stages"]["reading_errors_unadapted"] = plain_errors
    return plain


def stage_notes(meta: dict) -> list[Any]:
    """Notes for a matched voice: its similarity on the check lines at each stage (best preset, style
    search, adaptation) and which one is spoken; and, when an adaptation was found but not applied,
    why (``no_gain``: it did not raise the similarity; ``reads_worse``: the listening check heard
    it read a language less clearly)."""
    from cosyedge.notes import Note

    stages = meta.get("stages")
    if not stages:
        return []
    preset, search = stages["preset"], stages["search"]["similarity"]
    tried = stages.get("adapted") or []
    adapted = max((t["similarity"] for t in tried), default=None)
    kept = stages.get("kept", "search")
    applied = meta.get("adaptation")
    text = (f"check lines: best preset {preset['name']} {preset['similarity']:.2f}, style search {search:.2f}"
            + (f", with adaptation {adapted:.2f}" if adapted is not None else "")
            + f"; kept: {kept}" + (f" ({adapt.Adaptation.from_meta(applied).describe()})" if applied else ""))
    notes = [Note(text, code="voice_match_stages", preset=preset["name"], preset_similarity=preset["similarity"],
                  search_similarity=search, adapted_similarity=adapted, kept=kept)]
    skipped = stages.get("adaptation_skipped")  # a code, never text
    if tried and not applied and skipped in ("no_gain", "reads_worse"):
        why = ("it did not raise the similarity on the check lines" if skipped == "no_gain"
               else "the listening check heard it read a language less clearly")
        notes.append(Note(f"formant/pitch adaptation not applied: {why}", code="voice_match_adaptation_skipped",
                          reason=skipped))
    return notes
