"""Test-only: a shrunken upstream CosyVoice2 ``Qwen2LM`` with random weights, saved in the official layout.

The Qwen2 backbone keeps the real 151936-row vocabulary (so id 151646, ``<|endofprompt|>``, exists) and
shrinks everything else. ``transformers`` must be 4.51.3 (see ``scripts/install_reference.sh``): later
versions silently break upstream's cached decoding.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests.helpers import cosyvoice_reference as _reference

TINY_QWEN = dict(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, sliding_window=None)
SPEECH_TOKENS = 6561
EOS = 6561


def build_llm(qwen_dir: Path, seed: int = 0, std: float = 0.5):
    """Upstream ``Qwen2LM`` over a tiny Qwen2 saved to ``qwen_dir`` (config.json + weights), eval mode.

    Weights are drawn N(0, std) everywhere (norm gains included) so that logits are far from flat and a
    swapped or missing tensor cannot hide.
    """
    _reference.install_shim()
    import torch
    from cosyvoice.llm.llm import Qwen2Encoder, Qwen2LM
    from cosyvoice.utils.common import ras_sampling
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    qwen_dir = Path(qwen_dir)
    if not (qwen_dir / "config.json").is_file():
        Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN)).save_pretrained(qwen_dir)
    llm = Qwen2LM(llm_input_size=TINY_QWEN["hidden_size"], llm_output_size=TINY_QWEN["hidden_size"],
                  speech_token_size=SPEECH_TOKENS, llm=Qwen2Encoder(str(qwen_dir)),
                  sampling=functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1),
                  length_normalized_loss=True, lsm_weight=0, mix_ratio=[5, 15])
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in llm.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * std)
    return llm.eval()


def run_upstream(llm, text, prompt_text=(), prompt_speech=(), choose=None, min_ratio=2.0, max_ratio=20.0):
    """Run upstream ``Qwen2LM.inference``; return (tokens, per-step log-probs as numpy arrays).

    ``choose(logp, decoded, ignore_eos) -> int`` replaces upstream's sampler (injected as
    ``llm.sampling_ids``) so both sides make the same decisions.
    """
    import torch

    if choose is not None:
        llm.sampling_ids = lambda scores, decoded, sampling, ignore_eos=True: torch.tensor(
            [choose(scores.numpy(), list(decoded), ignore_eos)])
    try:
        return upstream_inference(llm, text, prompt_text, prompt_speech, max_token_text_ratio=max_ratio,
                                  min_token_text_ratio=min_ratio)
    finally:
        if choose is not None:
            del llm.sampling_ids


def upstream_inference(llm, text, prompt_text=(), prompt_speech=(), **options):
    """``llm.inference`` of upstream's Qwen2-based LLMs (v2 ``Qwen2LM``, v3 ``CosyVoice3LM``) on id
    lists, no speaker embedding, ``sampling=25``; ``options`` go to it too. Returns (tokens, the
    log-probs of every step as float64 numpy arrays), read by a hook on ``llm_decoder``."""
    import torch

    steps = []
    hook = llm.llm_decoder.register_forward_hook(
        lambda m, i, o: steps.append(o.log_softmax(-1)[0].double().numpy().copy()))
    i32 = lambda values: torch.tensor([list(values)], dtype=torch.int32)  # noqa: E731
    try:
        with torch.inference_mode():
            tokens = list(llm.inference(
                text=i32(text), text_len=torch.tensor([len(text)], dtype=torch.int32),
                prompt_text=i32(prompt_text), prompt_text_len=torch.tensor([len(prompt_text)], dtype=torch.int32),
                prompt_speech_token=i32(prompt_speech),
                prompt_speech_token_len=torch.tensor([len(prompt_speech)], dtype=torch.int32),
                embedding=torch.zeros(0, 192), sampling=25, **options))
    finally:
        hook.remove()
    return [int(t) for t in tokens], steps


def save_checkpoint(llm, directory: Path) -> Path:
    """``llm.pt`` (state dict) in ``directory``; returns its path."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(llm.state_dict(), directory / "llm.pt")
    return directory / "llm.pt"
