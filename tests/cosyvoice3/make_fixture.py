"""Build the CosyVoice3 parity fixture from an upstream checkout kept outside the repository.

    .venv-ref/bin/python -m tests.cosyvoice3.make_fixture --upstream-src /path/to/CosyVoice [--out DIR]

Upstream's CosyVoice3 classes are not on PyPI, so this script imports them from ``--upstream-src``
(a checkout of github.com/FunAudioLLM/CosyVoice; the commit is recorded), builds a shrunken
``CosyVoice3LM`` / ``CausalMaskedDiffWithDiT`` / ``CausalHiFTGenerator`` with seeded random weights and
computes reference outputs with upstream's own code. What it writes (``tests/data/cosyvoice3/`` by
default, committed, a few MB) needs no upstream code to use:

* ``weights.npz`` - every state-dict tensor of the three modules (float16: the weights are rounded to
  float16 before the reference runs, so the stored values are exact; the Qwen2 text table keeps only
  the rows the tiny tokenizer can produce, the others are zero), the tiny Qwen2 ``config.json`` and
  ``cosyvoice3.yaml`` as strings. :mod:`tests.helpers.cosyvoice3_fixture` turns it back into an
  official-layout directory (``llm.pt``, ``flow.pt``, ``hift.pt``, ``cosyvoice3.yaml``,
  ``CosyVoice-BlankEN/``, stand-in ``campplus.onnx`` / ``speech_tokenizer_v3.onnx``).
* ``reference.npz`` - upstream's outputs (see ``calls`` in the json), the streamed ones hop by hop
  (``stream``: :func:`stream_reference`).
* ``fixture.json`` - the upstream commit, package versions, the exact calls and their inputs.

Imports from the checkout need packages ``.venv-ref`` has (torch, transformers 4.51.3, x-transformers,
einops, matcha from the reference package); only ``matcha.utils`` (hydra/lightning loggers) and
``torchaudio`` (imported at module level, never called here) are stubbed while upstream imports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import numpy as np

from tests.helpers import REPO, upstream_yaml
from tests.helpers.cosyvoice_llm_reference import upstream_inference
from tests.helpers.cosyvoice_tokenizer import write_tiny_tokenizer

logger = logging.getLogger(__name__)

DEFAULT_OUT = REPO / "tests" / "data" / "cosyvoice3"
SPEECH_TOKENS = 6561
TEXT_ROWS_KEPT = 1000           # tiny BPE ids live below this; the specials sit at 151643 and up
QWEN2_BASE = 151643
TINY_QWEN = dict(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False, sliding_window=None)
TINY = {"prelookahead_channels": 64, "dit": dict(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2),
        "hift_channels": 32}
SILENT = (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)
SYSTEM = "You are a helpful assistant."
EOP = "<|endofprompt|>"
#: Strings whose token ids must match upstream's CosyVoice3Tokenizer exactly.
TOKENIZER_TEXTS = [
    f"{SYSTEM}{EOP}Hello world, this is a tiny test.",
    f"{SYSTEM}{EOP}你好，世界。",
    f"{SYSTEM} 请用四川话说这句话{EOP}",
    "报道[j][ǐ]予 and [HH][AH0][L][OW1]<|endofsystem|>[laughter]<strong>quick</strong>",
]
HIFT_NOISE_SEED = 20251
#: Target tokens of the streamed reference: with the 12-token prompt, hops of 38, 50, 100 and 7 (finalize).
STREAM_TOKENS = 195


# ----------------------------------------------------------------------------------------------
# Importing upstream
# ----------------------------------------------------------------------------------------------

def import_upstream(src: Path) -> None:
    """Put the checkout first on sys.path and stub what upstream imports but never uses here."""
    src = Path(src).resolve()
    if not (src / "cosyvoice" / "llm" / "llm.py").is_file():
        raise SystemExit(f"{src} is not a CosyVoice checkout (no cosyvoice/llm/llm.py)")
    sys.path.insert(0, str(src))
    if "cosyvoice" in sys.modules:
        raise SystemExit("a cosyvoice package was imported before the checkout; run this script on its own")
    import matcha  # the reference package's copy: BASECFM for CausalConditionalCFM
    import transformers  # noqa: F401  (before the torchaudio stub: it probes for torchaudio once)
    from transformers import AutoTokenizer, Qwen2ForCausalLM  # noqa: F401

    utils = types.ModuleType("matcha.utils")
    utils.__path__ = []
    pylogger = types.ModuleType("matcha.utils.pylogger")
    pylogger.get_pylogger = lambda name=__name__: logging.getLogger(name)
    utils.pylogger = pylogger
    sys.modules.update({"matcha.utils": utils, "matcha.utils.pylogger": pylogger})
    matcha.utils = utils
    torchaudio = types.ModuleType("torchaudio")
    torchaudio.__path__ = []
    compliance = types.ModuleType("torchaudio.compliance")
    compliance.__path__ = []
    kaldi = types.ModuleType("torchaudio.compliance.kaldi")
    sys.modules.update({"torchaudio": torchaudio, "torchaudio.compliance": compliance,
                        "torchaudio.compliance.kaldi": kaldi})
    level = logging.getLogger().level
    import cosyvoice.utils.file_utils  # noqa: F401  (sets the root logger to DEBUG)
    logging.getLogger().setLevel(level)
    found = Path(sys.modules["cosyvoice"].__file__).resolve()
    if src not in found.parents:
        raise SystemExit(f"imported cosyvoice from {found}, not from {src}")


def upstream_commit(src: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        name = Path(src).resolve().name
        return name.rsplit("-", 1)[-1] if "-" in name else "unknown"


# ----------------------------------------------------------------------------------------------
# Building the tiny upstream modules
# ----------------------------------------------------------------------------------------------

def _round_fp16(module, gen, std: float | None = None) -> None:
    """Redraw (``std``) or keep each parameter, then round it to float16 so storage is exact."""
    import torch

    with torch.no_grad():
        for param in module.parameters():
            if std is not None:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
            param.copy_(param.half().float())


#: Upstream's full sizes (Fun-CosyVoice3-0.5B; the Qwen2.5-0.5B backbone), for bench/cosyvoice3.py.
FULL_QWEN = dict(TINY_QWEN, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True)
FULL = {"prelookahead_channels": 1024, "dit": dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2),
        "hift_channels": 512}


def build_llm(qwen_dir: Path, seed: int, qwen: dict = TINY_QWEN, tweak: bool = True):
    import torch
    from cosyvoice.llm.llm import CosyVoice3LM, Qwen2Encoder
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    if not (qwen_dir / "config.json").is_file():  # from_pretrained below only seeds the weights
        Qwen2ForCausalLM(Qwen2Config(**qwen)).save_pretrained(qwen_dir)
    greedy = lambda scores, decoded, sampling: int(torch.argmax(scores))  # noqa: E731
    llm = CosyVoice3LM(llm_input_size=qwen["hidden_size"], llm_output_size=qwen["hidden_size"],
                       speech_token_size=SPEECH_TOKENS, llm=_encoder_from(qwen_dir, Qwen2Encoder, Qwen2Config),
                       sampling=greedy, length_normalized_loss=True, lsm_weight=0, mix_ratio=[5, 15])
    if not tweak:
        return llm.eval()
    _round_fp16(llm, torch.Generator().manual_seed(seed + 1), std=0.5)
    with torch.no_grad():
        table = llm.llm.model.model.embed_tokens.weight
        table[TEXT_ROWS_KEPT:QWEN2_BASE] = 0.0
        # A constant component in every input row and a matching column of the end-of-speech row make
        # ending likely enough that the random model stops (upstream's rule: any of ids 6562.. ends).
        llm.speech_embedding.weight[:, 0] = 3.0
        table[:TEXT_ROWS_KEPT, 0] = 3.0
        table[QWEN2_BASE:, 0] = 3.0
        llm.speech_embedding.weight[SPEECH_TOKENS + 2, 0] = -3.0  # task id: rarely a stop at step 0
        llm.llm_decoder.weight[SPEECH_TOKENS + 2:] *= 0.25  # the other 198 stop outputs: rarely drawn
        llm.llm_decoder.weight[SPEECH_TOKENS + 1, :] = 0.0
        llm.llm_decoder.weight[SPEECH_TOKENS + 1, 0] = 4.2
        llm.llm.model.model.norm.weight[0] = 1.0
    _round_fp16(llm, None)  # the values set above are stored as float16 too
    return llm.eval()


def _encoder_from(qwen_dir, encoder_cls, config_cls):
    """Upstream ``Qwen2Encoder`` on the tiny config (from_pretrained finds no weights: random init)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return encoder_cls(str(qwen_dir))


def build_flow(seed: int, sizes: dict = TINY, tweak: bool = True):
    import torch
    from omegaconf import DictConfig
    from cosyvoice.flow.DiT.dit import DiT
    from cosyvoice.flow.flow import CausalMaskedDiffWithDiT
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.transformer.upsample_encoder import PreLookaheadLayer

    torch.manual_seed(seed)
    estimator = DiT(**sizes["dit"], mel_dim=80, mu_dim=80, spk_dim=80, out_channels=80, static_chunk_size=50,
                    num_decoding_left_chunks=-1)
    cfm = CausalConditionalCFM(in_channels=240, n_spks=1, spk_emb_dim=80, estimator=estimator,
                               cfm_params=DictConfig({"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine",
                                                      "training_cfg_rate": 0.2, "inference_cfg_rate": 0.7,
                                                      "reg_loss_type": "l1"}))
    flow = CausalMaskedDiffWithDiT(input_size=80, output_size=80, spk_embed_dim=192, output_type="mel",
                                   vocab_size=SPEECH_TOKENS, input_frame_rate=25, only_mask_loss=True,
                                   token_mel_ratio=2, pre_lookahead_len=3,
                                   pre_lookahead_layer=PreLookaheadLayer(80, sizes["prelookahead_channels"], 3),
                                   decoder=cfm)
    if not tweak:
        return flow.eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # adaLN/proj weights are small by default: widen them so every path matters
        for name, param in flow.named_parameters():
            scale = 0.1 if name.endswith("bias") else 0.7 / max(1.0, param.shape[-1] ** 0.5)
            param.copy_(torch.randn(param.shape, generator=gen) * scale)
    _round_fp16(flow, gen)
    return flow.eval()


def build_hift(seed: int, f0_bias: float = 150.0, sizes: dict = TINY):
    import torch
    from cosyvoice.hifigan.f0_predictor import CausalConvRNNF0Predictor
    from cosyvoice.hifigan.generator import CausalHiFTGenerator

    torch.manual_seed(seed)
    ch = sizes["hift_channels"]
    hift = CausalHiFTGenerator(
        in_channels=80, base_channels=ch, nb_harmonics=8, sampling_rate=24000, nsf_alpha=0.1, nsf_sigma=0.003,
        nsf_voiced_threshold=10, upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
        istft_params={"n_fft": 16, "hop_len": 4}, resblock_kernel_sizes=[3, 7, 11],
        resblock_dilation_sizes=[[1, 3, 5]] * 3, source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3, 5]] * 3, lrelu_slope=0.1, audio_limit=0.99, conv_pre_look_right=4,
        f0_predictor=CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=ch))
    with torch.no_grad():
        hift.f0_predictor.classifier.bias.fill_(f0_bias)  # voiced frames, so the sine path is exercised
        for module in hift.modules():
            if hasattr(module, "alpha") and isinstance(module.alpha, torch.nn.Parameter):
                module.alpha.uniform_(0.5, 1.5)
    _round_fp16(hift, torch.Generator().manual_seed(seed + 1))
    return hift.eval()


def yaml_text(sizes: dict = TINY, qwen: dict = TINY_QWEN) -> str:
    """The tiny ``cosyvoice3.yaml``, in the layout of upstream's recipe (ace7c47), shrunken."""
    d = sizes["dit"]
    ch = sizes["hift_channels"]
    hift = upstream_yaml.hift("CausalHiFTGenerator", ch, ch, "CausalConvRNNF0Predictor",
                              extra="    conv_pre_look_right: 4\n")
    return f"""# tiny CosyVoice3 for parity tests (tests/cosyvoice3/make_fixture.py); layout of cosyvoice3.yaml
{upstream_yaml.qwen2_rates(qwen['hidden_size'])}\

{upstream_yaml.qwen2_llm("CosyVoice3LM")}
{upstream_yaml.causal_flow_head("CausalMaskedDiffWithDiT", 80)}\
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: {sizes['prelookahead_channels']}
        pre_lookahead_len: 3
{upstream_yaml.cfm_decoder("CausalConditionalCFM")}\
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: {d['dim']}
            depth: {d['depth']}
            heads: {d['heads']}
            dim_head: {d['dim_head']}
            ff_mult: {d['ff_mult']}
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

{hift}
{upstream_yaml.feat_extractor(1920, 480, "null")}\
get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
    version: cosyvoice3
allowed_special: 'all'
"""


# ----------------------------------------------------------------------------------------------
# Reference runs
# ----------------------------------------------------------------------------------------------

def run_llm(llm, text, prompt_text=(), prompt_speech=(), forced=None):
    """Upstream ``CosyVoice3LM.inference``: tokens and per-step log-probs.

    ``forced``: teacher forcing (the chooser returns these ids in turn); otherwise upstream's own
    ``sampling_ids`` runs with greedy arg-max as ``sampling`` (so its id-6561 mask applies).
    """
    saved = llm.sampling
    if forced is not None:
        queue = list(forced)
        llm.sampling = lambda scores, decoded, sampling: queue.pop(0) if queue else SPEECH_TOKENS + 1
    try:
        tokens, steps = upstream_inference(llm, text, prompt_text, prompt_speech)
    finally:
        llm.sampling = saved
    return tokens, np.stack(steps)


def hift_noise(n_samples: int) -> np.ndarray:
    """The sine-source noise injected on both sides: uniform [0, 1) as upstream's buffer, seeded."""
    return np.random.default_rng(HIFT_NOISE_SEED).random((n_samples, 9), dtype=np.float32)


def inject_hift_noise(hift, n_samples: int) -> None:
    import torch

    hift.m_source.l_sin_gen.sine_waves = torch.from_numpy(hift_noise(n_samples))[None]


def make(src: Path, out: Path, seed: int = 0) -> dict:
    import tempfile

    import torch

    import_upstream(src)
    from cosyvoice.cli.model import CosyVoice3Model
    from cosyvoice.tokenizer.tokenizer import CosyVoice3Tokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cosyvoice3-fixture-"))
    qwen = work / "CosyVoice-BlankEN"
    write_tiny_tokenizer(qwen)
    tokenizer = CosyVoice3Tokenizer(str(qwen))
    token_ids = [list(map(int, tokenizer.encode(t, allowed_special="all"))) for t in TOKENIZER_TEXTS]
    llm, flow, hift = build_llm(qwen, seed), build_flow(seed + 10), build_hift(seed + 20)
    rng = np.random.default_rng(seed + 30)
    ref: dict[str, np.ndarray] = {}
    calls: dict[str, dict] = {}

    # LLM: teacher-forced log-probs (prefill + 20 cached steps), and greedy tokens.
    text = token_ids[0][-8:]
    prompt_text = token_ids[0][:-8]
    prompt_speech = rng.integers(0, SPEECH_TOKENS, 12).tolist()
    forced = rng.integers(0, SPEECH_TOKENS, 21).tolist()
    _, logp = run_llm(llm, text, prompt_text, prompt_speech, forced=forced)
    ref["llm_forced_logp"] = logp[:21].astype(np.float32)
    calls["llm_forced"] = {"call": "CosyVoice3LM.inference (chooser returns `forced` in turn)", "text": text,
                           "prompt_text": prompt_text, "prompt_speech": prompt_speech, "forced": forced}
    greedy_tokens, greedy_logp = run_llm(llm, text, prompt_text, prompt_speech)
    calls["llm_greedy"] = {"call": "CosyVoice3LM.inference, sampling = arg-max (upstream sampling_ids masks "
                                   "id 6561 below min_len)", "text": text, "prompt_text": prompt_text,
                           "prompt_speech": prompt_speech, "tokens": greedy_tokens,
                           "stopped_by": len(greedy_logp) and int(np.argmax(greedy_logp[-1]))}

    # Flow: mel for given tokens, prompt tokens, prompt mel and embedding (fixed upstream noise).
    tokens = rng.integers(0, SPEECH_TOKENS, 30)
    prompt_tokens = rng.integers(0, SPEECH_TOKENS, 12)
    prompt_mel = (rng.standard_normal((24, 80)) * 2 - 5).astype(np.float32)
    embedding = rng.standard_normal(192).astype(np.float32)
    i32 = lambda a: torch.tensor(np.asarray(a)[None], dtype=torch.int32)  # noqa: E731
    with torch.inference_mode():
        mel, _ = flow.inference(token=i32(tokens), token_len=torch.tensor([len(tokens)], dtype=torch.int32),
                                prompt_token=i32(prompt_tokens),
                                prompt_token_len=torch.tensor([len(prompt_tokens)], dtype=torch.int32),
                                prompt_feat=torch.from_numpy(prompt_mel)[None],
                                prompt_feat_len=torch.tensor([24], dtype=torch.int32),
                                embedding=torch.from_numpy(embedding)[None], streaming=False, finalize=True)
    ref.update(flow_tokens=tokens, flow_prompt_tokens=prompt_tokens, flow_prompt_mel=prompt_mel,
               flow_embedding=embedding, flow_mel=mel[0].numpy())
    calls["flow"] = {"call": "CausalMaskedDiffWithDiT.inference(streaming=False, finalize=True)",
                     "inputs": ["flow_tokens", "flow_prompt_tokens", "flow_prompt_mel", "flow_embedding"],
                     "output": "flow_mel [80, 2N]"}

    # HiFT: audio for a mel with the injected sine noise.
    hift_mel = (rng.standard_normal((80, 40)) - 4).astype(np.float32)
    inject_hift_noise(hift, 40 * 480)
    with torch.inference_mode():
        audio, _ = hift.inference(speech_feat=torch.from_numpy(hift_mel)[None], finalize=True)
        f0 = hift.f0_predictor(torch.from_numpy(hift_mel)[None].double(), finalize=True)
    ref.update(hift_mel=hift_mel, hift_audio=audio[0].numpy(), hift_f0=f0[0].numpy())
    calls["hift"] = {"call": "CausalHiFTGenerator.inference(finalize=True)", "input": "hift_mel [80, T]",
                     "noise": f"sine_waves = default_rng({HIFT_NOISE_SEED}).random((T*480, 9), float32)",
                     "output": "hift_audio [T*480]"}

    # End to end: CosyVoice3Model.tts (llm_job's silent-token rule, flow, HiFT), greedy tokens.
    model = CosyVoice3Model(llm, flow, hift)
    e2e_text = token_ids[1][-6:]
    inject_hift_noise(hift, e2e_text.__len__() * 20 * 2 * 480)
    with torch.inference_mode():
        pieces = list(model.tts(text=i32(e2e_text), flow_embedding=torch.from_numpy(embedding)[None],
                                llm_embedding=torch.zeros(0, 192), prompt_text=i32(token_ids[1][:-6]),
                                llm_prompt_speech_token=i32(prompt_tokens), flow_prompt_speech_token=i32(prompt_tokens),
                                prompt_speech_feat=torch.from_numpy(prompt_mel)[None], stream=False, speed=1.0))
    e2e_tokens, _ = run_llm(llm, e2e_text, token_ids[1][:-6], prompt_tokens.tolist())
    ref["e2e_audio"] = torch.cat([p["tts_speech"] for p in pieces], dim=1)[0].numpy()
    calls["e2e"] = {"call": "CosyVoice3Model.tts(stream=False, speed=1.0), LLM sampling = arg-max",
                    "text": e2e_text, "prompt_text": token_ids[1][:-6], "prompt_speech": prompt_tokens.tolist(),
                    "flow_prompt": "flow_prompt_tokens / flow_prompt_mel / flow_embedding",
                    "llm_tokens": e2e_tokens, "noise": calls["hift"]["noise"]}

    calls["stream"] = stream_reference(model, ref, rng, calls["hift"]["noise"])

    weights: dict[str, np.ndarray] = {}
    for prefix, module in (("llm.", llm), ("flow.", flow), ("hift.", hift)):
        for key, value in module.state_dict().items():
            if prefix == "llm." and key == "llm.model.lm_head.weight":
                continue  # never used by upstream's decoding; rebuilt as zeros
            weights[prefix + key] = value.detach().numpy().astype(np.float16)
    files = {name: hashlib.sha256((qwen / name).read_bytes()).hexdigest()
             for name in ("vocab.json", "merges.txt", "tokenizer_config.json")}
    np.savez_compressed(out / "weights.npz", **weights,
                        __qwen_config__=np.array((qwen / "config.json").read_text(encoding="utf-8")),
                        __yaml__=np.array(yaml_text()))
    np.savez_compressed(out / "reference.npz", **ref)
    info = {
        "upstream": {"repository": "github.com/FunAudioLLM/CosyVoice", "commit": upstream_commit(src)},
        "versions": {name: _version(name) for name in ("torch", "transformers", "x-transformers", "numpy",
                                                          "cosyvoice-minicpmo", "einops")},
        "seed": seed, "tiny": {"qwen": TINY_QWEN, **TINY}, "silent_tokens": list(SILENT),
        "tokenizer": {"texts": TOKENIZER_TEXTS, "ids": token_ids, "vocab_size": len(tokenizer.tokenizer),
                      "files_sha256": files},
        "calls": calls,
    }
    (out / "fixture.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return info


def stream_hops(model, n_prompt: int, n_tokens: int) -> list[tuple[int, int, bool]]:
    """Upstream's hop schedule (``CosyVoice2Model.tts(stream=True)``, which CosyVoice3Model inherits) for
    ``n_tokens`` target tokens that are all there: (offset, tokens given to the flow, finalize) per call.

    The first hop is ``token_hop_len`` plus the padding that ends the prompt's last chunk; each hop
    multiplies the hop length by ``stream_scale_factor`` up to ``token_max_hop_len`` (25, 50, 100, 100...
    on a model that has not streamed before: upstream keeps the grown length on the model object);
    a hop is rendered once its tokens and the ``pre_lookahead_len`` tokens after it are there; the rest
    goes in one ``finalize=True`` call."""
    hop, lookahead = model.token_hop_len, model.flow.pre_lookahead_len
    pad = int(np.ceil(n_prompt / hop) * hop - n_prompt)
    offset, calls = 0, []
    while True:
        this_hop = hop + pad if offset == 0 else hop
        if n_tokens - offset < this_hop + lookahead:
            break
        calls.append((offset, offset + this_hop + lookahead, False))
        offset += this_hop
        hop = min(model.token_max_hop_len, hop * model.stream_scale_factor)
    calls.append((offset, n_tokens, True))
    return calls


def stream_reference(model, ref: dict, rng, noise: str) -> dict:
    """Upstream's streamed CosyVoice3 output, hop by hop: ``CosyVoice3Model.token2wav(stream=True)`` on
    the schedule of :func:`stream_hops`, ``finalize=False`` for every hop but the last.

    The last call is made with ``stream=True, finalize=True`` (chunk-causal, as every hop): upstream's
    ``tts`` glue makes it with ``stream=False`` (full attention over the whole sentence, which a
    streaming runtime that computes each chunk once cannot give); cosyedge's CosyVoice2 stream makes the
    same choice. Stored: each hop's mel (the flow's output from the hop's first frame) and audio (what
    token2wav returns), concatenated, with the hop boundaries in the json."""
    import torch

    tokens = rng.integers(0, SPEECH_TOKENS, STREAM_TOKENS)
    prompt_tokens, prompt_mel, embedding = ref["flow_prompt_tokens"], ref["flow_prompt_mel"], ref["flow_embedding"]
    flow, hift = model.flow, model.hift
    mels: list[np.ndarray] = []
    inference = flow.inference

    def captured(**kwargs):
        mel, extra = inference(**kwargs)
        mels.append(mel[0].numpy())
        return mel, extra

    hops = stream_hops(model, len(prompt_tokens), len(tokens))
    inject_hift_noise(hift, len(tokens) * flow.token_mel_ratio * 480)
    uuid, hop_mels, hop_audio = "fixture-stream", [], []
    model.hift_cache_dict[uuid] = None
    flow.inference = captured
    i32 = lambda a: torch.tensor(np.asarray(a)[None], dtype=torch.int32)  # noqa: E731
    try:
        with torch.inference_mode():
            for offset, end, finalize in hops:
                audio = model.token2wav(token=i32(tokens[:end]), prompt_token=i32(prompt_tokens),
                                        prompt_feat=torch.from_numpy(prompt_mel)[None],
                                        embedding=torch.from_numpy(embedding)[None], token_offset=offset,
                                        uuid=uuid, stream=True, finalize=finalize)
                hop_mels.append(mels[-1][:, offset * flow.token_mel_ratio:])
                hop_audio.append(audio[0].numpy())
    finally:
        del flow.inference
        model.hift_cache_dict.pop(uuid, None)
    ref.update(stream_tokens=tokens, stream_mel=np.concatenate(hop_mels, axis=1),
               stream_audio=np.concatenate(hop_audio))
    return {"call": "CosyVoice3Model.token2wav(stream=True, finalize=False) per hop, finalize=True for the "
                    "last (see stream_reference); prompt = flow_prompt_tokens / flow_prompt_mel / flow_embedding",
            "tokens": "stream_tokens", "hops": [[o, e, f] for o, e, f in hops],
            "hop_mel_frames": [m.shape[1] for m in hop_mels], "hop_samples": [a.shape[0] for a in hop_audio],
            "outputs": "stream_mel [80, sum(hop_mel_frames)], stream_audio [sum(hop_samples)]", "noise": noise}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream-src", type=Path, required=True, help="upstream CosyVoice checkout (outside the repo)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    info = make(args.upstream_src, args.out)
    sizes = {p.name: p.stat().st_size for p in Path(args.out).iterdir()}
    print(f"wrote {args.out}: {sizes}; upstream {info['upstream']['commit']}; "
          f"greedy tokens {len(info['calls']['llm_greedy']['tokens'])}, e2e tokens "
          f"{len(info['calls']['e2e']['llm_tokens'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
