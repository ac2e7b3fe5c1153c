"""CosyVoice3 streamed hop by hop against upstream's ``CosyVoice3Model.token2wav(stream=True)``.

The fixture (tests/cosyvoice3/make_fixture.py, ``calls.stream``) holds upstream's mel and audio per hop
for 195 target tokens after a 12-token prompt, on upstream's hop schedule (38 = 25 + the prompt's
padding, 50, 100, then 7 with ``finalize=True``). No upstream code runs here; the model under test is
the fixture converted by our converter (fp32; int8 for the engine test).

Must hold (fp32): the hop schedule is upstream's; each hop's mel within 1e-4 of upstream's
(``streaming=True``, chunk-causal DiT over every frame so far); each hop's audio within 1e-3 (the causal
HiFT over the target mel so far, ``finalize=False`` but for the last hop, upstream's sine noise).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from cosyedge.config import Settings
from cosyedge.engines.base import SynthesisOptions
from cosyedge.engines.cosyvoice.common.manifest import ModelDir
from cosyedge.engines.cosyvoice.v3 import version as version3
from cosyedge.engines.cosyvoice.v3.causal_hift import CausalHiftStream
from cosyedge.engines.cosyvoice.v3.stream import HopSchedule
from cosyedge.engines.loader import load_engine
from tests.cosyvoice3.make_fixture import HIFT_NOISE_SEED
from tests.helpers import cosyvoice3_fixture as fixture

pytestmark = pytest.mark.slow  # needs the converted fixture, built by scripts/test.sh in .venv-ref

MEL_TOL = 1e-4
AUDIO_TOL = 1e-3


@pytest.fixture(scope="module")
def ref():
    return fixture.load_reference()


@pytest.fixture(scope="module")
def call():
    return fixture.info()["calls"]["stream"]


def _hop_ends(call) -> list[int]:
    return [end - (0 if final else 3) for _, end, final in call["hops"]]


def test_hop_schedule_is_upstreams(call, ref):
    """25 + the prompt's padding to a 25-token chunk, then doubling up to 100 (ace7c47's tts loop)."""
    schedule = HopSchedule()
    n_prompt = len(ref["flow_prompt_tokens"])
    assert [schedule.hop(i, n_prompt) for i in range(4)] == [38, 50, 100, 100]
    ends = np.cumsum([schedule.hop(i, n_prompt) for i in range(3)]).tolist()
    assert _hop_ends(call) == ends + [len(ref["stream_tokens"])]
    assert [final for *_, final in call["hops"]] == [False, False, False, True]


def test_streamed_mel_and_audio_per_hop_match_upstream(tiny_cosyvoice3_models, ref, call):
    t2w = version3.load_token2wav(ModelDir.load(tiny_cosyvoice3_models / fixture.MODEL_IDS["none"]))
    assert t2w.can_stream and t2w.step_session is None  # opened by the first stream, not at load
    t2w.vocoder.noise_seed = HIFT_NOISE_SEED  # the sine noise the fixture gave upstream
    stream = t2w.stream(ref["flow_prompt_tokens"], ref["flow_prompt_mel"], ref["flow_embedding"])
    tokens = ref["stream_tokens"]
    mel_bounds = np.cumsum([0] + call["hop_mel_frames"])
    audio_bounds = np.cumsum([0] + call["hop_samples"])
    hops_audio = []
    for token in tokens:  # one at a time, as the LLM hands them over
        for audio in stream.push([token]):
            hop = len(hops_audio)
            mel = stream.mel[:, mel_bounds[hop]:]
            assert mel.shape[1] == call["hop_mel_frames"][hop], hop
            assert np.abs(mel - ref["stream_mel"][:, mel_bounds[hop]:mel_bounds[hop + 1]]).max() < MEL_TOL, hop
            hops_audio.append(audio)
    assert len(hops_audio) == 3 and stream.tokens_rendered == _hop_ends(call)[2]
    hops_audio.append(stream.finish())
    assert stream.cache_bytes == 0  # the caches go when the sentence ends
    last_mel = stream.mel[:, mel_bounds[3]:]
    assert last_mel.shape[1] == call["hop_mel_frames"][3]
    assert np.abs(last_mel - ref["stream_mel"][:, mel_bounds[3]:]).max() < MEL_TOL
    for hop, audio in enumerate(hops_audio):
        expected = ref["stream_audio"][audio_bounds[hop]:audio_bounds[hop + 1]]
        assert audio.shape == expected.shape, hop
        assert np.abs(audio - expected).max() < AUDIO_TOL, hop


def test_the_streamed_hift_vocodes_only_the_new_samples_as_upstreams_whole_recomputation(tiny_cosyvoice3_models):
    """Upstream vocodes the whole mel so far at every hop; the stream vocodes a window reaching past the
    decoder's left context and gives the same samples (a window of 4 frames is 1e-2 off)."""
    vocoder = version3.load_token2wav(ModelDir.load(tiny_cosyvoice3_models / fixture.MODEL_IDS["none"])).vocoder
    mel = (np.random.default_rng(1).standard_normal((80, 700)) - 4).astype(np.float32)
    stream, sent = CausalHiftStream(vocoder), 0
    for end in (60, 110, 160, 260, 410, 610, 700):
        final = end == 700
        whole = vocoder.streamed(mel[:, :end], finalize=final)[sent:]
        sent += whole.shape[0]
        part = stream.push(mel[:, :end], finalize=final)
        assert part.shape == whole.shape and np.abs(part - whole).max() < 1e-6, end


def _voice(engine):
    t = np.arange(3 * 16000) / 16000
    return engine.encode_prompt((0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), 16000, "Hello world.")


def test_a_streamed_v3_request_arrives_hop_by_hop(tiny_cosyvoice3_models):
    """The engine streams a v3 sentence in several chunks; their audio is the sentence's."""
    engine = load_engine(Settings(models_dir=tiny_cosyvoice3_models, model=fixture.MODEL_IDS["int8"],
                                  onnx_threads=1, thread_calibration=False))
    try:
        text = "Hello world, this is a tiny test of a streamed sentence that is long enough for hops."
        chunks, held = [], []
        for chunk in engine.synthesize(text, _voice(engine), SynthesisOptions(seed=3, stream=True)):
            chunks.append(chunk)
            held.append(engine.token2wav.stream_cache_bytes)
        assert held[0] > 0 and engine.token2wav.stream_cache_bytes == 0  # the DiT caches go with the sentence
        first = [c for c in chunks if c.index == 0]
        assert len(first) >= 2 and all(c.continues for c in first[:-1]) and not first[-1].continues
        assert all(c.audio.size for c in first[:-1])
        # upstream's whole left context and first hop: named apart in a non-exact answer's note
        assert set(engine.inapplicable_levers) == {"left_chunks", "first_hop_tokens"}
    finally:
        engine.close()


def test_a_v3_model_converted_before_streaming_speaks_whole_and_says_so(tiny_cosyvoice3_models, tmp_path):
    """A v3 model without the streamed DiT graph (converted before) loads, answers a streamed request one
    chunk per sentence as before, and the catalog says a reconversion brings streaming."""
    from cosyedge.catalog.models import ModelCatalog

    old = tmp_path / "models" / "cosyvoice3-old"
    shutil.copytree(tiny_cosyvoice3_models / fixture.MODEL_IDS["int8"], old)
    manifest = json.loads((old / "manifest.json").read_text())
    stream = manifest["config"]["flow"].pop("stream")
    del manifest["files"][stream["estimator"]]
    (old / stream["estimator"]).unlink()
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert "brings hop-by-hop streaming" in ModelCatalog(old.parent).get("cosyvoice3-old").reconvert
    engine = load_engine(Settings(models_dir=old.parent, model="cosyvoice3-old", onnx_threads=1,
                                  thread_calibration=False))
    try:
        assert not engine.token2wav.can_stream
        chunks = list(engine.synthesize("Hello world. Good night.", _voice(engine),
                                        SynthesisOptions(seed=3, stream=True)))
        assert [c.index for c in chunks] == list(range(len(chunks))) and not any(c.continues for c in chunks)
    finally:
        engine.close()


def test_a_cancelled_v3_stream_frees_its_caches(tiny_cosyvoice3_models):
    from cosyedge.errors import CancelledError

    engine = load_engine(Settings(models_dir=tiny_cosyvoice3_models, model=fixture.MODEL_IDS["int8"],
                                  onnx_threads=1, thread_calibration=False))
    try:
        stop = []
        text = "Hello world, this is a tiny test of a streamed sentence that is long enough for hops."
        with pytest.raises(CancelledError):
            for _ in engine.synthesize(text, _voice(engine), SynthesisOptions(seed=3, stream=True),
                                       cancelled=lambda: bool(stop)):
                assert engine.token2wav.stream_cache_bytes > 0
                stop.append(True)
        assert stop and engine.token2wav.stream_cache_bytes == 0
    finally:
        engine.close()


def test_a_voices_next_sentence_starts_from_its_kept_prompt_chunks(tiny_cosyvoice3_models):
    """The prompt's chunks whose look-ahead is still prompt are kept for the voice's next sentence,
    which then gives the same mel and audio as without them."""
    t2w = version3.load_token2wav(ModelDir.load(tiny_cosyvoice3_models / fixture.MODEL_IDS["none"]))
    rng = np.random.default_rng(5)
    prompt, tokens = rng.integers(0, 6561, 60), rng.integers(0, 6561, 120)
    prompt_mel = (rng.standard_normal((120, 80)) - 4).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    runs = []
    for _ in range(2):
        stream = t2w.stream(prompt, prompt_mel, embedding)
        audio = [a for token in tokens for a in stream.push([token])] + [stream.finish()]
        runs.append((stream.prompt_cached, stream.mel, np.concatenate(audio)))
    (first_cached, mel_a, audio_a), (second_cached, mel_b, audio_b) = runs
    assert t2w.prompt_states.nbytes > 0 and second_cached and mel_a.shape == mel_b.shape
    assert np.abs(mel_a - mel_b).max() < 1e-5 and np.abs(audio_a - audio_b).max() < 1e-5
