"""End to end against upstream: tiny upstream Qwen2LM + flow + HiFT vs our converted pipeline.

Same text ids, same prompt (encoded once by our engine, then handed to both sides), same chooser
(greedy, injected into upstream), same CFM noise (upstream's fixed buffer, stored by the converter) and
the same HiFT noise draw (captured from upstream), fp32 conversion. Tolerances: tokens identical; mel
and waveform 2e-4 absolute (measured: mel 4.5e-6 / 6.6e-6, waveform 3.8e-6 against a peak of 0.07;
the margin is for other CPUs' float32 kernels).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the parity tests need the reference: scripts/install_reference.sh")
pytestmark = [pytest.mark.reference, pytest.mark.slow]  # builds, converts and runs tiny models (~10-40 s)

from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.engines.cosyvoice.common.sampling import greedy  # noqa: E402
from tests.helpers import cosyvoice_llm_reference as _llm_reference, cosyvoice_reference as _reference  # noqa: E402
from tests.helpers.cosyvoice_tiny import write_tiny_checkpoint  # noqa: E402

MEL_TOL = 2e-4
WAV_TOL = 2e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from cosyedge.export.cosyvoice.v2.convert import convert

    root = tmp_path_factory.mktemp("e2e")
    ckpt = write_tiny_checkpoint(root / "src", presets=False)
    convert(ckpt["dir"], root / "models" / "fp32", quantize="none")
    engine = load_engine(Settings(models_dir=root / "models", model="fp32", onnx_threads=2))
    t = np.arange(3 * 24000) / 24000
    audio = (0.3 * np.sin(2 * np.pi * 140 * t * (1 + 0.1 * np.sin(2 * t)))).astype(np.float32)
    prompt = engine.encode_prompt(audio, 24000, "Hello world, this is a tiny test.")
    yield ckpt, engine, prompt
    engine.close()


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual"])
def test_text_ids_to_audio_matches_upstream(setup, mode):
    ckpt, engine, prompt = setup
    text_ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog.")
    prompt_tokens = prompt.arrays["tokens"]
    prompt_mel = prompt.arrays["mel"]
    embedding = prompt.arrays["embedding"]
    if mode == "zero_shot":
        prompt_text, llm_speech = engine.tokenizer.encode(prompt.meta["transcript"]), prompt_tokens.tolist()
    else:
        prompt_text, llm_speech = [], []
    choose = greedy(_llm_reference.EOS)

    want_tokens, _ = _llm_reference.run_upstream(ckpt["llm"], text_ids, prompt_text, llm_speech, choose)
    got_tokens = engine.lm.generate(text_ids, choose, prompt_text, llm_speech)
    assert got_tokens == want_tokens and len(got_tokens) >= 2 * len(text_ids)

    i32 = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    with torch.no_grad():
        want_mel, _ = ckpt["flow"].inference(
            token=torch.tensor([want_tokens]), token_len=i32(len(want_tokens)),
            prompt_token=torch.from_numpy(prompt_tokens)[None], prompt_token_len=i32(prompt_tokens.size),
            prompt_feat=torch.from_numpy(prompt_mel)[None], prompt_feat_len=i32(prompt_mel.shape[0]),
            embedding=torch.from_numpy(embedding)[None], streaming=False, finalize=True)
    want_mel = want_mel[0].numpy()
    got_mel = engine.token2wav.mel(got_tokens, prompt_tokens, prompt_mel, embedding)
    assert got_mel.shape == want_mel.shape == (80, 2 * len(got_tokens))
    np.testing.assert_allclose(got_mel, want_mel, atol=MEL_TOL, rtol=0)

    want_wav, _, noise = _reference.upstream_hift_capturing_noise(ckpt["hift"], want_mel)
    got_wav = engine.token2wav.vocoder(got_mel, noise=noise)
    assert got_wav.shape == want_wav.shape == (480 * got_mel.shape[1],)
    np.testing.assert_allclose(got_wav, want_wav, atol=WAV_TOL, rtol=0)
    assert np.abs(want_wav).max() > 0.01  # not a silent comparison
