"""CosyVoice-300M streamed hop by hop against upstream's own loop (``CosyVoiceModel``, 46dfe04).

Upstream's ``tts(stream=True)`` is driven with every token already decoded (its schedule depends only
on how many tokens wait: hops of 100 + 20 overlap tokens, 100 dropped per hop), calling its
``token2wav`` per hop (``finalize=False``) and for the rest (``finalize=True``); the random draws of
each call (the CFM's start noise, SineGen's phases and noise) are captured and handed to ours, hop
for hop. Each hop's audio must match within 1e-3 (as the whole-sentence HiFT parity), with a prompt
(zero-shot: the flow cache holds the prompt's frames) and without one.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference needs torch: scripts/install_reference.sh")
pytestmark = pytest.mark.reference

from cosyedge.engines.cosyvoice.common.manifest import ModelDir  # noqa: E402
from cosyedge.engines.cosyvoice.v1.token2wav import TOKEN_OVERLAP, Token2WavV1  # noqa: E402
from tests.helpers import cosyvoice1_reference as reference  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(upstream CosyVoiceModel; our Token2WavV1) on one tiny fp32 conversion."""
    reference.install_shim()
    from cosyvoice.cli.model import CosyVoiceModel

    from cosyedge.export.cosyvoice.v1.convert import convert

    root = tmp_path_factory.mktemp("v1stream")
    flow, hift = reference.build_flow(seed=6), reference.build_hift(seed=7)
    src = reference.write_checkpoint(root / "CosyVoice-300M", flow=flow, hift=hift)
    convert(src, root / "model", quantize="none", steps=["flow", "hift"])
    return CosyVoiceModel(None, flow, hift), Token2WavV1.load(ModelDir.load(root / "model"))


def _upstream_hops(model, tokens, prompt_tokens, prompt_feat, embedding):
    """Upstream's stream loop over ``tokens``: the audio of each call and the draws each made."""
    import torch.distributions.uniform as uniform

    uid = "parity"
    model.tts_speech_token_dict[uid] = list(tokens)
    model.hift_cache_dict[uid], model.mel_overlap_dict[uid] = None, torch.zeros(1, 80, 0)
    model.flow_cache_dict[uid] = torch.zeros(1, 80, 0, 2)
    draws: list[tuple[str, torch.Tensor]] = []
    real_randn, real_sample = torch.randn_like, uniform.Uniform.sample

    def randn_like(x, *args, **kwargs):
        draws.append(("randn", real_randn(x, *args, **kwargs)))
        return draws[-1][1]

    def sample(self, *args, **kwargs):
        draws.append(("uniform", real_sample(self, *args, **kwargs)))
        return draws[-1][1]

    def call(chunk, finalize):
        start = len(draws)
        with torch.no_grad():
            audio = model.token2wav(token=torch.tensor([chunk], dtype=torch.int32), prompt_token=prompt_tokens,
                                    prompt_feat=prompt_feat, embedding=embedding, uuid=uid, finalize=finalize)
        return audio[0].numpy(), draws[start:]

    torch.randn_like, uniform.Uniform.sample = randn_like, sample
    try:
        hops, hop = [], model.token_min_hop_len
        while len(model.tts_speech_token_dict[uid]) >= hop + model.token_overlap_len:
            hops.append(call(model.tts_speech_token_dict[uid][:hop + model.token_overlap_len], False))
            model.tts_speech_token_dict[uid] = model.tts_speech_token_dict[uid][hop:]
            hop = min(model.token_max_hop_len, int(hop * model.stream_scale_factor))
        hops.append(call(model.tts_speech_token_dict[uid], True))
    finally:
        torch.randn_like, uniform.Uniform.sample = real_randn, real_sample
    return hops


@pytest.mark.parametrize("n_prompt", [11, 0])
def test_each_hop_matches_upstreams_stream_loop(pair, n_prompt):
    model, ours = pair
    gen = torch.Generator().manual_seed(17 + n_prompt)
    tokens = torch.randint(0, 4096, (250,), generator=gen).tolist()
    prompt = torch.randint(0, 4096, (1, n_prompt), generator=gen, dtype=torch.int32)
    frames = int(n_prompt / 50 * 22050 / 256) + 1 if n_prompt else 0
    prompt_feat = torch.randn(1, frames, 80, generator=gen)
    embedding = torch.randn(1, 192, generator=gen)
    expected = _upstream_hops(model, tokens, prompt, prompt_feat, embedding)
    assert len(expected) == 3  # 2 hops of 100 + 20 tokens, then the last 50

    draws = iter(draw for _, calls in expected for draw in calls)
    hop_flow, source = ours.flow.hop, ours.vocoder.source

    def flow_with_upstreams_noise(*args, **kwargs):
        kind, z = next(draws)
        assert kind == "randn"
        return hop_flow(*args, **{**kwargs, "noise": z[0].numpy()})

    def source_with_upstreams_draws(mel, noise=None, rng=None, phases=None):
        # SineGen's start phases and noise, then the source module's own noise branch (not heard)
        (kind1, first), (kind2, second), (kind3, _) = next(draws), next(draws), next(draws)
        assert (kind1, kind2, kind3) == ("uniform", "randn", "randn")
        return source(mel, noise=second[0].numpy(), phases=first[0, :, 0].numpy())

    ours.flow.hop, ours.vocoder.source = flow_with_upstreams_noise, source_with_upstreams_draws
    try:
        stream = ours.stream(prompt[0].numpy(), prompt_feat[0].numpy(), embedding[0].numpy())
        got = []
        for i in range(0, len(tokens), 7):  # tokens arrive a few at a time, as from the LLM
            got += stream.push(tokens[i:i + 7])
        got.append(stream.finish())
    finally:
        del ours.flow.hop, ours.vocoder.source
    assert len(got) == len(expected) and stream.hops == len(expected)
    for i, (audio, (reference_audio, _)) in enumerate(zip(got, expected)):
        assert audio.shape == reference_audio.shape, f"hop {i}"
        assert np.abs(audio - reference_audio).max() < 1e-3, f"hop {i}"
    assert np.abs(np.concatenate(got)).max() > 0.01
    assert TOKEN_OVERLAP == model.token_overlap_len
