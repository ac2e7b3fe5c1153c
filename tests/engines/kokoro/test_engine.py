"""KokoroEngine plumbing on a tiny generated ONNX model with Kokoro's signature (no real weights)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from cosyedge.engines.base import Engine, SynthesisOptions, TextAnalysis, VoicePrompt
from cosyedge.engines.kokoro.engine import KokoroEngine
from cosyedge.engines.kokoro.presets import PRESETS
from cosyedge.errors import CancelledError, EngineError, NotFoundError, ParameterError
from tests.helpers import tiny_kokoro
from tests.helpers.tiny_kokoro import PACKS, Sentence



class SplitOnPeriodFrontend:
    """Each '.'-terminated piece is a sentence; each character is one token."""

    def sentences(self, text: str, language: str = "auto") -> list[Sentence]:
        return [Sentence(p.strip(), p.strip()) for p in text.split(".") if p.strip()]

    def analyze(self, text: str, language: str = "auto") -> TextAnalysis:
        return TextAnalysis(text=text, language=language, sentences=tuple(self.sentences(text, language)))

    def token_ids(self, phonemes: str) -> list[int]:
        return [1 + (ord(c) % 100) for c in phonemes]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> KokoroEngine:
    return tiny_kokoro.engine(tmp_path_factory.mktemp("tiny"), SplitOnPeriodFrontend())


def run(engine: KokoroEngine, text: str, voice="female_1", **opts):
    return list(engine.synthesize(text, voice, SynthesisOptions(**opts)))


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.presets() == ["female_1", "female_2", "male_1", "male_2", "child"]
    assert not engine.capabilities.native_clone and not engine.capabilities.native_instruct


def test_synthesize_reads_its_own_analysis_as_it_reads_the_text(engine):
    text = "Hello there. General Kenobi. Bye."
    analysis = engine.analyze(text, "en")
    from_analysis = run(engine, analysis, language="en")
    from_text = run(engine, text, language="en")
    assert [c.text for c in from_analysis] == [c.text for c in from_text] == ["Hello there", "General Kenobi", "Bye"]
    for a, b in zip(from_analysis, from_text):
        np.testing.assert_array_equal(a.audio, b.audio)


def test_one_chunk_per_sentence_with_progress(engine):
    seen = []
    chunks = list(engine.synthesize("Hello there. General Kenobi. Bye.", "female_1", SynthesisOptions(),
                                    progress=lambda done, total: seen.append((done, total))))
    assert [c.text for c in chunks] == ["Hello there", "General Kenobi", "Bye"]
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert all(c.audio.dtype == np.float32 and c.sample_rate == 24000 for c in chunks)
    assert all(np.abs(c.audio).max() <= 1.0 for c in chunks)


def test_duration_follows_tokens_and_speed(engine):
    # The tiny model emits 600 samples per token (+2 pad tokens) divided by speed; trimming keeps it.
    short = run(engine, "abcd")[0].audio
    long = run(engine, "abcdefghijklmnop")[0].audio
    fast = run(engine, "abcdefghijklmnop", speed=2.0)[0].audio
    assert len(long) / len(short) == pytest.approx(18 / 6, rel=0.05)
    assert len(long) / len(fast) == pytest.approx(2.0, rel=0.05)


def test_style_row_depends_on_token_count_and_voice(engine):
    a = run(engine, "abcd", voice="female_1")[0].audio
    b = run(engine, "abcd", voice="male_1")[0].audio
    again = run(engine, "abcd", voice="female_1")[0].audio
    np.testing.assert_array_equal(a, again)  # deterministic
    assert not np.allclose(a, b)


def test_presets_are_valid_blends():
    for name, weights in PRESETS.items():
        assert set(weights) <= set(PACKS), name
        assert sum(weights.values()) == pytest.approx(1.0)


def test_unknown_voice_lists_valid_ones(engine):
    with pytest.raises(NotFoundError) as err:
        run(engine, "abc", voice="darth")
    assert "female_1" in str(err.value) and "child" in str(err.value)


@pytest.mark.parametrize("speed", [0.0, 0.49, 2.01, -1.0, float("nan")])
def test_speed_out_of_range(engine, speed):
    with pytest.raises(ParameterError, match="speed"):
        run(engine, "abc", speed=speed)


def test_cancel_between_sentences(engine):
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 1

    gen = engine.synthesize("One. Two. Three.", "female_1", SynthesisOptions(), cancelled=cancelled)
    first = next(gen)
    assert first.text == "One"
    with pytest.raises(CancelledError):
        next(gen)


def test_too_many_phonemes_is_an_engine_error(engine):
    with pytest.raises(EngineError, match="510"):
        engine.infer(list(range(1, 600)), engine.packs["jf_alpha"], 1.0)


def test_voice_prompt_for_another_engine_is_refused(engine):
    prompt = VoicePrompt(engine="cosyvoice2", model_id="x", arrays={"embedding": np.zeros(192)})
    with pytest.raises(ParameterError, match="encode the prompt again"):
        run(engine, "abc", voice=prompt)


def test_an_encoded_prompt_reads_as_its_closest_built_in_voice(engine):
    from cosyedge.engines.kokoro import closest_voice

    chosen = VoicePrompt(engine="kokoro", model_id="kokoro-int8",
                         meta={"method": closest_voice.METHOD, "version": closest_voice.VERSION,
                               "preset_voice": "female_2"})
    np.testing.assert_array_equal(run(engine, "abcd", voice=chosen)[0].audio,
                                  run(engine, "abcd", voice="female_2")[0].audio)
    with pytest.raises(ParameterError, match="encode the prompt again"):
        run(engine, "abcd", voice=VoicePrompt(engine="kokoro", model_id="kokoro-int8", meta={"method": "x"}))


def test_a_prompt_with_a_style_of_its_own_reads_that_style(engine):
    """The benches' blends (bench/intelligibility.py) are prompts with a style pack."""
    style = np.full((510, 1, 256), 0.5, dtype=np.float32)
    prompt = VoicePrompt(engine="kokoro", model_id="kokoro-int8", arrays={"style": style})
    loud = run(engine, "abcd", voice=prompt)[0].audio
    assert np.abs(loud).max() == pytest.approx(0.6, abs=0.01)  # gain = 0.1 + |mean(style)|


@dataclass
class ClauseSentence(Sentence):
    ends_sentence: bool = True


class CutFirstClauseFrontend(SplitOnPeriodFrontend):
    """Like SplitOnPeriodFrontend, but the first sentence's first ','-clause is its own call."""

    def sentences(self, text: str, language: str = "auto") -> list[ClauseSentence]:
        out = [ClauseSentence(s.text, s.phonemes, language) for s in super().sentences(text, language)]
        head, sep, tail = out[0].text.partition(",")
        if not sep:
            return out
        return [ClauseSentence(head + ",", head + ",", language, ends_sentence=False),
                ClauseSentence(tail.strip(), tail.strip(), language), *out[1:]]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_clause_cut_chunk_gets_the_clause_pause_and_stream_equals_file(engine, language):
    from cosyedge.service import synthesis
    from cosyedge.audio import CROSSFADE_S, SENTENCE_PAUSE_S
    from cosyedge.engines.kokoro.engine import CLAUSE_PAUSE_S

    cut = KokoroEngine(session=engine.session, packs=engine.packs, frontend=CutFirstClauseFrontend())
    options = SynthesisOptions(language=language)
    chunks = list(cut.synthesize("abcd, efgh. ijkl.", "female_1", options))
    assert [c.text for c in chunks] == ["abcd,", "efgh", "ijkl"]
    assert chunks[0].pause_after_s == CLAUSE_PAUSE_S[language] < SENTENCE_PAUSE_S
    assert chunks[1].pause_after_s is None and chunks[2].pause_after_s is None

    pieces = list(synthesis.stream(cut, "abcd, efgh. ijkl.", "female_1", options, 1000))
    result = synthesis.synthesize(cut, "abcd, efgh. ijkl.", "female_1", options, 1000)
    np.testing.assert_array_equal(np.concatenate([p for _, p in pieces]), result.audio)
    sr = 24000
    sizes = [c.audio.size for c in chunks]
    assert [p.size for _, p in pieces] == [sizes[0], int(CLAUSE_PAUSE_S[language] * sr) + sizes[1],
                                           int(SENTENCE_PAUSE_S * sr) + sizes[2]]
    assert result.sentences == ["abcd,", "efgh", "ijkl"]
    assert not pieces[1][1][:int(CLAUSE_PAUSE_S[language] * sr)].any()  # the pause is silence
    assert pieces[0][1][0] == 0.0 and pieces[0][1][int(CROSSFADE_S * sr)] == chunks[0].audio[int(CROSSFADE_S * sr)]


def test_runtime_graph_missing_from_manifest_names_the_fix(tmp_path):
    from cosyedge.config import from_env
    from cosyedge.errors import ModelMissingError

    (tmp_path / "manifest.json").write_text(json.dumps(
        {"engine": "kokoro", "files": {}, "runtime_graph": {"file": "elsewhere.onnx"}}))
    with pytest.raises(ModelMissingError, match="elsewhere.onnx.*setup-model"):
        KokoroEngine.load(tmp_path, from_env({}, onnx_threads=1))


@dataclass
class WordSentence(Sentence):
    """A fake sentence whose words are given as (text, first symbol, end symbol)."""

    words: tuple = ()


class WordsFrontend(SplitOnPeriodFrontend):
    """Each space-separated word is one word of the sentence; every character one token."""

    def sentences(self, text: str, language: str = "auto") -> list[Sentence]:
        out = []
        for piece in (p.strip() for p in text.split(".") if p.strip()):
            words, pos = [], 0
            for word in piece.split(" "):
                words.append((word, pos, pos + len(word)))
                pos += len(word) + 1
            out.append(WordSentence(piece, piece, words=tuple(words)))
        return out


def test_words_are_timed_from_the_durations_in_the_chunks_own_audio(tmp_path):
    engine = tiny_kokoro.engine(tmp_path, WordsFrontend(), durations=True)
    chunk = run(engine, "ab cde f.")[0]
    sr, frame = engine.capabilities.sample_rate, 600
    # 10 tokens (pad, 8 symbols, pad) of 600 samples each; the chunk starts where the trim keeps it
    first = max(0, int(np.flatnonzero(np.abs(tiny_kokoro_audio(engine, "ab cde f")) > 0.003)[0]) - int(0.04 * sr))
    expected = [("ab", 1, 3), ("cde", 4, 7), ("f", 8, 9)]
    assert [w.text for w in chunk.words] == ["ab", "cde", "f"]
    for word, (_, start, end) in zip(chunk.words, expected):
        assert word.start == pytest.approx((start * frame - first) / sr)
        assert word.end == pytest.approx((end * frame - first) / sr)
    assert all(0 <= w.start < w.end <= chunk.audio.size / sr for w in chunk.words)


def test_a_graph_without_durations_gives_no_word_timings(engine):
    assert run(engine, "ab cde.")[0].words == ()


def tiny_kokoro_audio(engine: KokoroEngine, phonemes: str) -> np.ndarray:
    """The tiny model's raw output for ``phonemes`` (before the engine trims it)."""
    pack = engine.style_pack("female_1")
    return engine.infer(engine.frontend.token_ids(phonemes), pack, 1.0)


def test_word_timings_follow_the_crop_and_trim_offset_and_stay_inside_the_chunk():
    from cosyedge.engines.kokoro.engine import word_timings

    durations = np.array([10, 2, 3, 1, 4, 10])  # pad, 4 symbols, pad: frames of 600 samples
    words = [("a", 0, 2), ("b", 3, 4), ("beyond", 4, 6)]
    timed = word_timings(words, durations, first=6000, length=7200, sample_rate=24000)
    # "a": symbols 0-1 = frames 10..15 -> samples 6000..9000, minus the 6000 cut before the chunk
    assert [(w.text, w.start, w.end) for w in timed] == [("a", 0.0, 3000 / 24000), ("b", 3600 / 24000, 6000 / 24000)]
    late = word_timings([("b", 3, 4)], durations, first=6000, length=5000, sample_rate=24000)
    assert late[0].end == 5000 / 24000  # clamped to the chunk's end
