"""CosyVoice-300M (v1) parity: our converted ONNX + numpy runtime against the upstream PyTorch modules.

Shrunken upstream modules with odd widths and random weights (tests/helpers/cosyvoice1_reference.py),
written in the official layout and converted in fp32, then driven side by side, at two sets of sizes:
"tiny", and "unequal" where every pair of sizes upstream lets differ does (``llm_input_size`` against
the LLM's width, the flow encoder's ``output_size`` against its ``input_size``):

* LLM: teacher-forced per-step log-probs within 1e-4 and identical greedy tokens, for the sft
  (speaker embedding), zero-shot (prompt text + speech + embedding) and instruct (prompt text, no
  embedding) inputs; upstream's sampler is replaced by the same greedy rule on both sides;
* flow: mel for given tokens, prompt and the noise upstream drew (captured) within 1e-4, for a target
  of more than 40 tokens (the regulator's three parts), one without a prompt and one at 40;
* HiFT: 22.05 kHz audio within 1e-3 abs with upstream's SineGen draws (phases, noise) injected, over
  ~31k samples (the phase accumulates over the whole utterance);
* tokenizer: ids of whisper's multilingual tokenizer (``allowed_special='all'``), specials included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference needs torch: scripts/install_reference.sh")
pytestmark = pytest.mark.reference

from cosyedge.engines.cosyvoice.v1.llm import SpeechLMv1  # noqa: E402
from cosyedge.engines.cosyvoice.common.manifest import ModelDir  # noqa: E402
from cosyedge.engines.cosyvoice.common.sampling import greedy  # noqa: E402
from cosyedge.engines.cosyvoice.v1.tiktoken_bpe import TiktokenBPE  # noqa: E402
from cosyedge.engines.cosyvoice.v1.token2wav import Token2WavV1  # noqa: E402
from tests.helpers import cosyvoice1_reference as reference  # noqa: E402

EOS = reference.EOS


@pytest.fixture(scope="module", params=["tiny", "unequal"])
def pair(request, tmp_path_factory):
    """(upstream llm, flow, hift; our converted fp32 model dir), at the "tiny" sizes and at the
    "unequal" ones (LLM inputs narrower than its layers, flow encoder narrower than its input)."""
    from cosyedge.export.cosyvoice.v1.convert import convert

    size = request.param
    root = tmp_path_factory.mktemp(f"v1parity-{size}")
    llm, flow = reference.build_llm(size, seed=5), reference.build_flow(size, seed=6)
    hift = reference.build_hift(size, seed=7)
    src = reference.write_checkpoint(root / "CosyVoice-300M-SFT", llm=llm, flow=flow, hift=hift, size=size,
                                     speakers=reference.SFT_SPEAKERS)
    convert(src, root / "models" / "v1", quantize="none")
    return llm, flow, hift, ModelDir.load(root / "models" / "v1")


def _i32(values) -> "torch.Tensor":
    return torch.tensor([list(values)], dtype=torch.int32)


def _upstream_greedy(ws, decoded, sampling, ignore_eos=True):
    scores = ws.clone()
    if ignore_eos:
        scores[EOS] = -float("inf")
    return scores.argmax().reshape(1)


@pytest.mark.parametrize("mode", ["sft", "zero_shot", "instruct"])
def test_llm_logprobs_and_greedy_tokens(pair, mode):
    llm, _, _, model = pair
    gen = torch.Generator().manual_seed(11)
    text = [50260, 1000, 2000, 3000, 51000, 77, 4242]
    prompt_text = [500, 600, 700] if mode != "sft" else []
    prompt_speech = torch.randint(0, 4096, (9,), generator=gen).tolist() if mode == "zero_shot" else []
    embedding = torch.randn(1, 192, generator=gen) if mode != "instruct" else torch.zeros(0, 192)

    steps = []
    hook = llm.llm_decoder.register_forward_hook(lambda m, i, o: steps.append(o.log_softmax(-1)[0].clone()))
    llm.sampling_ids = _upstream_greedy
    try:
        expected = list(llm.inference(
            text=_i32(text), text_len=torch.tensor([len(text)], dtype=torch.int32), prompt_text=_i32(prompt_text),
            prompt_text_len=torch.tensor([len(prompt_text)], dtype=torch.int32),
            prompt_speech_token=_i32(prompt_speech) if prompt_speech else torch.zeros(1, 0, dtype=torch.int32),
            prompt_speech_token_len=torch.tensor([len(prompt_speech)], dtype=torch.int32),
            embedding=embedding, max_token_text_ratio=5, min_token_text_ratio=2))
    finally:
        hook.remove()
        del llm.sampling_ids

    lm = SpeechLMv1.load(model)
    ours: list[np.ndarray] = []
    got = lm.generate(text, greedy(EOS), prompt_text, prompt_speech,
                      embedding[0].numpy() if mode != "instruct" else None, max_ratio=5, on_step=ours.append)
    assert got == expected and len(got) >= 2 * len(text)
    assert len(ours) == len(steps)
    for i, (ref, mine) in enumerate(zip(steps, ours)):
        ref = ref.numpy().copy()
        if i == 0:
            ref[EOS] = -np.inf  # upstream masks end-of-speech after the step, as we do
        assert np.array_equal(np.isfinite(ref), np.isfinite(mine))
        finite = np.isfinite(ref)
        assert np.abs(ref[finite] - mine[finite]).max() < 1e-4, f"step {i}"


def _capture_randn_like():
    captured, real = [], torch.randn_like

    def recording(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        captured.append(out.clone())
        return out
    return captured, real, recording


@pytest.mark.parametrize("n_tokens,n_prompt", [(47, 11), (13, 0), (40, 6)])
def test_flow_mel_with_the_noise_upstream_drew(pair, n_tokens, n_prompt):
    _, flow, _, model = pair
    gen = torch.Generator().manual_seed(n_tokens)
    tokens = torch.randint(0, 4096, (1, n_tokens), generator=gen, dtype=torch.int32)
    prompt = torch.randint(0, 4096, (1, n_prompt), generator=gen, dtype=torch.int32)
    frames = int(n_prompt / 50 * 22050 / 256) + 1 if n_prompt else 0   # not a whole multiple, as real prompts
    prompt_feat = torch.randn(1, frames, 80, generator=gen)
    embedding = torch.randn(1, 192, generator=gen)
    captured, real, recording = _capture_randn_like()
    torch.randn_like = recording
    try:
        mel, _ = flow.inference(token=tokens, token_len=torch.tensor([n_tokens], dtype=torch.int32),
                                prompt_token=prompt, prompt_token_len=torch.tensor([n_prompt], dtype=torch.int32),
                                prompt_feat=prompt_feat, prompt_feat_len=torch.tensor([frames]), embedding=embedding,
                                flow_cache=torch.zeros(1, 80, 0, 2))
    finally:
        torch.randn_like = real
    ours = Token2WavV1.load(model).flow(tokens[0].numpy(), prompt[0].numpy(), prompt_feat[0].numpy(),
                                        embedding[0].numpy(), noise=captured[0][0].numpy())
    assert ours.shape == tuple(mel.shape[1:]) == (80, int(n_tokens / 50 * 22050 / 256))
    assert np.abs(mel[0].numpy() - ours).max() < 1e-4


def test_hift_audio_with_sinegen_draws_injected(pair):
    import torch.distributions.uniform as uniform

    _, _, hift, model = pair
    mel = (torch.randn(1, 80, 121, generator=torch.Generator().manual_seed(3)) * 1.5 - 3.0)
    draws: dict[str, torch.Tensor] = {}
    real_sample = uniform.Uniform.sample

    def record_phases(self, *args, **kwargs):
        draws["phases"] = real_sample(self, *args, **kwargs)
        return draws["phases"]
    captured, real, recording = _capture_randn_like()
    torch.randn_like, uniform.Uniform.sample = recording, record_phases
    try:
        with torch.no_grad():
            wav, source = hift.inference(speech_feat=mel)
    finally:
        torch.randn_like, uniform.Uniform.sample = real, real_sample
    vocoder = Token2WavV1.load(model).vocoder
    mel_np = mel[0].numpy()
    excitation = vocoder.source(mel_np, noise=captured[0][0].numpy(), phases=draws["phases"][0, :, 0].numpy())
    audio = vocoder.decode(mel_np, excitation)
    assert audio.shape == (121 * 256,) == tuple(wav.shape[1:])
    assert np.abs(source[0, 0].numpy() - excitation).max() < 1e-4
    assert np.abs(wav[0].numpy() - audio).max() < 1e-3
    assert np.abs(wav[0].numpy()).max() > 0.01  # not silence: the comparison means something


TEXTS = ["<|en|>Hello world, it's 3.14!", "你好，世界。<|zh|>今天天气真好<endofprompt>",
         "<|ja|>こんにちは<|endoftext|><|0.02|><|30.00|>", "Theo 'Crimson', is a fiery leader.<|endofprompt|>[laughter]",
         "<|yue|><|ko|>안녕하세요 🎉  \n\t spaces", "<strong>x</strong><|notimestamps|><|transcribe|>"]


def test_tokenizer_ids_match_whisper_including_specials(pair):
    whisper_tokenizer = pytest.importorskip("whisper.tokenizer", reason="openai-whisper + tiktoken (requirements-ref.txt)")
    ref = whisper_tokenizer.get_tokenizer(multilingual=True, num_languages=100, language="en",
                                          task="transcribe").encoding
    ours = TiktokenBPE.load(pair[3].path / "tokenizer")
    assert ours.vocab_size == ref.n_vocab == 51866
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text, allowed_special="all"), text
    assert ours.decode(ours.encode("Hello 你好")) == "Hello 你好"
