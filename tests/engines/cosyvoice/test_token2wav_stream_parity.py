"""Streamed token2wav against upstream CosyVoice2's streaming path, on shrunken upstream modules.

The reference is upstream at 46dfe04 restated step for step (``cosyvoice/cli/model.py``,
``CosyVoice2Model.tts(stream=True)`` and ``token2wav``): hop 1 = 25 tokens + the prompt's padding to a
chunk, later hops 25, each waiting for 3 look-ahead tokens; every hop calls
``flow.inference(all tokens so far, streaming=True, finalize=False)`` and keeps the frames after the
offset; the rest goes through ``finalize=True`` (with ``streaming=True``: see ``Token2WavStream``).
HiFT gets the previous hop's 8 mel frames in front, its source cache and the Hamming cross-fade.

Tolerances: mel 1e-4 absolute per hop (fp32; the chunk caches change only the order of fp32 sums,
measured ~4e-6); audio 1e-3 absolute (the harmonic source's float32 phase, see the non-streamed test).
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from tests.helpers import cosyvoice_reference as ref

ref.install_shim()
import torch  # noqa: E402

pytestmark = [pytest.mark.reference, pytest.mark.slow]

HOP, LOOKAHEAD, MEL_CACHE = 25, 3, 8


@pytest.fixture(scope="module")
def upstream():
    return ref.build_flow("tiny", seed=0), ref.build_hift("tiny", seed=0)


@pytest.fixture(scope="module")
def model_dir(upstream, tmp_path_factory):
    from cosyedge.commands import convert
    flow, hift = upstream
    root = tmp_path_factory.mktemp("cosyvoice2_stream")
    src = ref.write_model_dir(root / "src", flow, hift, size="tiny")
    parser = argparse.ArgumentParser()
    convert.register(parser.add_subparsers(dest="command", required=True))
    for name, extra in (("fp32", []), ("int8", ["--quantize", "int8"])):
        args = parser.parse_args(["convert", "cosyvoice2", "--src", str(src), "--out", str(root / name),
                                  "--steps", "flow,hift", *extra])
        assert args.func(args) == 0
    return root


class Recording:
    """An onnxruntime session stand-in that records the frames of every estimator-step call."""

    def __init__(self, session) -> None:
        self.session, self.frames, self.past = session, [], []

    def run(self, names, feeds):
        if "x" in feeds:
            self.frames.append(feeds["x"].shape[2])
            self.past.append(past_frames(feeds))
        return self.session.run(names, feeds)


def past_frames(feeds) -> int:
    """The cached frames an estimator-step call attends to: chunks x frames per layer input
    (``key_0 [C, B, heads, F, D]``), or the first converter's packed ``kv [frames, ...]``."""
    if "kv" in feeds:
        return feeds["kv"].shape[0]
    return feeds["key_0"].shape[0] * feeds["key_0"].shape[3]


@pytest.fixture(scope="module")
def t2w(model_dir):
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
    return Token2Wav.load(model_dir / "fp32", threads=2, verify_hashes=True)


def _inputs(n_prompt: int, n_tokens: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return {"tokens": torch.randint(0, 6561, (1, n_tokens), generator=gen),
            "prompt_tokens": torch.randint(0, 6561, (1, n_prompt), generator=gen),
            "prompt_feat": torch.randn(1, 2 * n_prompt, 80, generator=gen) * 2 - 4,
            "embedding": torch.randn(1, 192, generator=gen)}


def _i32(value: int):
    return torch.tensor([value], dtype=torch.int32)


def upstream_stream_mels(flow, inputs) -> list[np.ndarray]:
    """Upstream's per-hop mels (the loop of ``CosyVoice2Model.tts(stream=True)``, all tokens known)."""
    tokens, n_prompt = inputs["tokens"], inputs["prompt_tokens"].shape[1]
    pad = int(np.ceil(n_prompt / HOP) * HOP - n_prompt)

    def inference(n: int, finalize: bool) -> np.ndarray:
        with torch.no_grad():
            mel, _ = flow.inference(token=tokens[:, :n], token_len=_i32(n), prompt_token=inputs["prompt_tokens"],
                                    prompt_token_len=_i32(n_prompt), prompt_feat=inputs["prompt_feat"],
                                    prompt_feat_len=_i32(2 * n_prompt), embedding=inputs["embedding"],
                                    streaming=True, finalize=finalize)
        return mel[0].numpy()

    offset, hops = 0, []
    while True:
        hop = HOP + pad if offset == 0 else HOP
        if tokens.shape[1] - offset < hop + LOOKAHEAD:
            break
        hops.append(inference(offset + hop + LOOKAHEAD, False)[:, 2 * offset:])
        offset += hop
    hops.append(inference(tokens.shape[1], True)[:, 2 * offset:])
    return hops


def upstream_stream_audio(hift, mels: list[np.ndarray]):
    """Upstream's HiFT cache + fade over the hop mels; also returns the source noise each call drew."""
    from cosyvoice.utils.common import fade_in_out

    window = np.hamming(2 * MEL_CACHE * 480)
    cache, out, noises, drawn = None, [], [], []
    real = torch.randn_like

    def recording(x, *args, **kwargs):
        value = real(x, *args, **kwargs)
        drawn.append(value[0].clone().numpy())
        return value

    torch.randn_like = recording
    try:
        for i, hop in enumerate(mels):
            final = i == len(mels) - 1
            mel = torch.from_numpy(hop)[None]
            source_cache = torch.zeros(1, 1, 0)
            if cache is not None:
                mel, source_cache = torch.concat([cache["mel"], mel], dim=2), cache["source"]
            drawn.clear()
            with torch.no_grad():
                speech, source = hift.inference(speech_feat=mel, cache_source=source_cache)
            noises.append(drawn[0])  # SineGen2's noise is the first draw of a call
            if cache is not None:
                speech = fade_in_out(speech, cache["speech"], window)
            if not final:
                n = MEL_CACHE * 480
                cache = {"mel": mel[:, :, -MEL_CACHE:], "source": source[:, :, -n:], "speech": speech[:, -n:]}
                speech = speech[:, :-n]
            out.append(speech[0].numpy())
    finally:
        torch.randn_like = real
    return out, noises


@pytest.mark.parametrize("n_prompt,n_tokens", [(30, 110), (50, 80), (0, 60)])
def test_streamed_mel_equals_upstream_hop_by_hop(upstream, t2w, n_prompt, n_tokens):
    flow, _ = upstream
    inputs = _inputs(n_prompt, n_tokens, seed=n_prompt + n_tokens)
    expected = upstream_stream_mels(flow, inputs)
    assert len(expected) >= 3
    stream = t2w.flow.stream(inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(),
                             inputs["embedding"][0].numpy())
    got = np.concatenate([stream.push(t) for t in inputs["tokens"][0].numpy().reshape(-1, 1)]
                         + [stream.finish()], axis=1)
    offset = 0
    for hop in expected:
        np.testing.assert_allclose(got[:, offset:offset + hop.shape[1]], hop, atol=1e-4, rtol=0)
        offset += hop.shape[1]
    assert got.shape[1] == offset == 2 * n_tokens


def test_streamed_hift_equals_upstream(upstream, t2w):
    flow, hift = upstream
    mels = upstream_stream_mels(flow, _inputs(30, 110, seed=1))
    expected, noises = upstream_stream_audio(hift, mels)
    from cosyedge.engines.cosyvoice.common.hift import HiftStream
    stream = HiftStream(t2w.vocoder, MEL_CACHE)
    for i, (mel, noise, want) in enumerate(zip(mels, noises, expected)):
        got = stream.push(mel, final=i == len(mels) - 1, noise=noise)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)
    assert sum(a.size for a in expected) == 480 * 2 * 110


def test_token2wav_stream_follows_upstream_hops(upstream, t2w):
    """The hop schedule: audio comes out exactly when upstream's loop would yield, same lengths."""
    flow, hift = upstream
    inputs = _inputs(30, 110, seed=2)
    expected, _ = upstream_stream_audio(hift, upstream_stream_mels(flow, inputs))
    stream = t2w.stream(inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(),
                        inputs["embedding"][0].numpy(), rng=np.random.default_rng(0))
    got, when = [], []
    for i, token in enumerate(inputs["tokens"][0].numpy()):
        for audio in stream.push([token]):
            got.append(audio)
            when.append(i + 1)
    got.append(stream.finish())
    # First hop: 25 + 20 (prompt 30 -> 50) + 3 look-ahead tokens; then every 25.
    assert when == [48, 73, 98]
    assert [a.size for a in got] == [a.size for a in expected]
    assert all(np.abs(a).max() <= 0.99 for a in got)


def test_each_chunk_is_computed_once(upstream, t2w):
    """No prefix recomputation: each estimator call sees one chunk (<= 50 frames) and every frame
    passes through each Euler step exactly once, with the earlier frames as cache."""
    inputs = _inputs(30, 110, seed=3)
    encoder, estimator = t2w.flow.stream_sessions
    recording = Recording(estimator)
    t2w.flow.stream_sessions = (encoder, recording)
    try:
        stream = t2w.flow.stream(inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(),
                                 inputs["embedding"][0].numpy())
        for token in inputs["tokens"][0].numpy():
            stream.push([token])
        stream.finish()
    finally:
        t2w.flow.stream_sessions = (encoder, estimator)
    total = 2 * (30 + 110)
    assert max(recording.frames) <= 50
    assert sum(recording.frames) == 10 * total
    per_step_past = recording.past[::10]
    assert per_step_past == [sum(recording.frames[:i:10]) for i in range(0, len(recording.frames), 10)]


def test_fewer_steps_stream(t2w):
    inputs = _inputs(30, 60, seed=4)
    args = (inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(), inputs["embedding"][0].numpy())
    full = t2w.flow.stream(*args)
    fast = t2w.flow.stream(*args, n_timesteps=4)
    tokens = inputs["tokens"][0].numpy()
    a = np.concatenate([full.push(tokens), full.finish()], axis=1)
    b = np.concatenate([fast.push(tokens), fast.finish()], axis=1)
    assert a.shape == b.shape and np.abs(a - b).max() > 1e-2
    assert len(fast._kv) == 4


def test_int8_stream_with_float16_cache_stays_close_to_fp32(model_dir, t2w):
    """A quality figure, not parity (as the non-streamed int8 test): int8 graphs with the float16
    key/value cache against the fp32 stream, SNR of the mel."""
    import json

    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
    from cosyedge.export.cosyvoice.common.quantize import snr_db
    manifest = json.loads((model_dir / "int8" / "manifest.json").read_text())
    assert manifest["config"]["flow"]["stream"]["kv_dtype"] == "float16"
    int8 = Token2Wav.load(model_dir / "int8", threads=2)
    inputs = _inputs(30, 110, seed=5)
    args = (inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(), inputs["embedding"][0].numpy())
    mels = []
    for runtime in (t2w, int8):
        stream = runtime.flow.stream(*args)
        mels.append(np.concatenate([stream.push(inputs["tokens"][0].numpy()), stream.finish()], axis=1))
    snr = snr_db(mels[0], mels[1])
    print(f"streamed int8 + float16 cache vs fp32 (tiny random weights): mel SNR {snr:.1f} dB")
    assert snr > 15.0


@pytest.mark.parametrize("n_prompt,first_hop", [(30, 10), (0, 6)])
def test_a_short_first_hop_is_upstreams_partial_chunk(upstream, t2w, n_prompt, first_hop):
    """The quality modes' short first hop (``first_hop_tokens``): upstream's flow on the tokens so far
    (``finalize=False``, the 3 look-ahead tokens after the hop), the hop's frames; the next hop's frames
    then come from the whole chunk, as upstream's next call gives them."""
    flow, _ = upstream
    inputs = _inputs(n_prompt, 56, seed=7 + first_hop)
    n = first_hop + LOOKAHEAD
    with torch.no_grad():
        partial, _ = flow.inference(token=inputs["tokens"][:, :n], token_len=_i32(n),
                                    prompt_token=inputs["prompt_tokens"], prompt_token_len=_i32(n_prompt),
                                    prompt_feat=inputs["prompt_feat"], prompt_feat_len=_i32(2 * n_prompt),
                                    embedding=inputs["embedding"], streaming=True, finalize=False)
    stream = t2w.flow.stream(inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(),
                             inputs["embedding"][0].numpy())
    tokens = inputs["tokens"][0].numpy()
    assert stream.push(tokens[:n]).shape[1] == 0  # no whole chunk yet
    np.testing.assert_allclose(stream.preview(n_prompt + first_hop), partial[0].numpy()[:, :2 * first_hop],
                               atol=1e-4, rtol=0)
    later = np.concatenate([stream.push(tokens[n:]), stream.finish()], axis=1)  # the preview left no trace
    expected = np.concatenate(upstream_stream_mels(flow, inputs), axis=1)
    np.testing.assert_allclose(later, expected, atol=1e-4, rtol=0)


def test_no_cfg_is_upstream_with_a_zero_guidance_rate(upstream, t2w):
    """``cfg_steps=0`` (the live mode's CFG schedule): upstream's solver with ``inference_cfg_rate`` 0,
    whose mix is the conditional velocity alone, whole sentence and streamed."""
    flow, _ = upstream
    inputs = _inputs(30, 60, seed=8)
    args = (inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(), inputs["embedding"][0].numpy())
    rate = flow.decoder.inference_cfg_rate
    flow.decoder.inference_cfg_rate = 0.0
    try:
        expected_stream = np.concatenate(upstream_stream_mels(flow, inputs), axis=1)
        with torch.no_grad():
            whole, _ = flow.inference(token=inputs["tokens"], token_len=_i32(60), prompt_token=inputs["prompt_tokens"],
                                      prompt_token_len=_i32(30), prompt_feat=inputs["prompt_feat"],
                                      prompt_feat_len=_i32(60), embedding=inputs["embedding"], streaming=False,
                                      finalize=True)
    finally:
        flow.decoder.inference_cfg_rate = rate
    np.testing.assert_allclose(t2w.flow(inputs["tokens"][0].numpy(), *args, cfg_steps=0), whole[0].numpy(),
                               atol=1e-4, rtol=0)
    stream = t2w.flow.stream(*args, cfg_steps=0)
    got = np.concatenate([stream.push(inputs["tokens"][0].numpy()), stream.finish()], axis=1)
    np.testing.assert_allclose(got, expected_stream, atol=1e-4, rtol=0)
