"""Test-only: the sections of upstream's hyperpyyaml recipes that the tiny v1, v2 and v3 configs share.

``cosyvoice.yaml`` (CosyVoice-300M), ``cosyvoice2.yaml`` and ``cosyvoice3.yaml`` repeat the same
sampler, CFM settings, HiFT generator and prompt-mel blocks with a few values changed; the test
configs (:mod:`tests.helpers.cosyvoice_reference`, :mod:`tests.helpers.cosyvoice1_reference`,
``tests/cosyvoice3/make_fixture.py``) build theirs from these, in upstream's layout and wording.
Each function returns whole lines (indented as in the recipe, ending with a newline). The committed
CosyVoice3 fixture stores its yaml: these must keep writing it byte for byte.
"""

from __future__ import annotations

#: ``sampling:`` under ``llm:`` (ras_sampling with the recipes' settings).
RAS_SAMPLING = """\
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""


def qwen2_rates(hidden_size: int) -> str:
    """The top-level keys before v2's and v3's ``llm:`` section: the Qwen2 width and the token rates
    (25 tokens/s, 2 mel frames per token, chunks of 25 tokens)."""
    return f"""\
sample_rate: 24000
llm_input_size: {hidden_size}
llm_output_size: {hidden_size}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1
"""


def qwen2_llm(llm_class: str) -> str:
    """The ``llm:`` section of v2 (``Qwen2LM``) and v3 (``CosyVoice3LM``)."""
    return f"""\
llm: !new:cosyvoice.llm.llm.{llm_class}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
""" + RAS_SAMPLING


def causal_flow_head(flow_class: str, input_size: int) -> str:
    """The first lines of v2's and v3's ``flow:`` section (25 tokens/s, 2 mel frames per token)."""
    return f"""\
flow: !new:cosyvoice.flow.flow.{flow_class}
    input_size: {input_size}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
"""


def conformer_encoder(encoder_class: str, size: int, heads: int, units: int, blocks: int,
                      input_size: int | None = None) -> str:
    """``encoder:`` under ``flow:``: v1's ``encoder.ConformerEncoder`` and v2's
    ``upsample_encoder.UpsampleConformerEncoder`` (v2 adds its chunk size after these lines);
    ``size`` wide, reading ``input_size`` (default: ``size``)."""
    return f"""\
    encoder: !new:cosyvoice.transformer.{encoder_class}
        output_size: {size}
        attention_heads: {heads}
        linear_units: {units}
        num_blocks: {blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {size if input_size is None else input_size}
        use_cnn_module: False
        macaron_style: False
"""


def cfm_decoder(cfm_class: str) -> str:
    """``decoder:`` under ``flow:`` up to its estimator: the CFM and its solver settings."""
    return f"""\
    decoder: !new:cosyvoice.flow.flow_matching.{cfm_class}
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
"""


def hift(generator: str, base_channels: int, cond_channels: int, f0_predictor: str,
         upsample_rates: str = "[8, 5, 3]", upsample_kernels: str = "[16, 11, 7]",
         source_kernels: str = "[7, 7, 11]",
         source_dilations: str = "[[1, 3, 5], [1, 3, 5], [1, 3, 5]]", extra: str = "") -> str:
    """The ``hift:`` section; the rates and kernels are written as the recipe writes them (text).
    ``extra``: lines after ``audio_limit`` (v3's ``conv_pre_look_right``)."""
    return f"""\
hift: !new:cosyvoice.hifigan.generator.{generator}
    in_channels: 80
    base_channels: {base_channels}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: {upsample_rates}
    upsample_kernel_sizes: {upsample_kernels}
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: {source_kernels}
    source_resblock_dilation_sizes: {source_dilations}
    lrelu_slope: 0.1
    audio_limit: 0.99
{extra}    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.{f0_predictor}
        num_class: 1
        in_channels: 80
        cond_channels: {cond_channels}
"""


def feat_extractor(n_fft: int, hop: int, fmax: str) -> str:
    """The prompt-mel settings (``matcha.utils.audio.mel_spectrogram``); window = ``n_fft``."""
    return f"""\
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: {n_fft}
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: {hop}
    win_size: {n_fft}
    fmin: 0
    fmax: {fmax}
    center: False
"""


def unet_estimator(decoder_class: str, sizes: dict) -> str:
    """``estimator:`` under ``decoder:``: v1's ``ConditionalDecoder`` and v2's
    ``CausalConditionalDecoder`` (v2 adds its chunk lines), with a preset's ``channels``,
    ``attention_head_dim``, ``n_blocks``, ``num_mid_blocks`` and ``num_heads``."""
    return f"""\
        estimator: !new:cosyvoice.flow.decoder.{decoder_class}
            in_channels: 320
            out_channels: 80
            channels: {sizes["channels"]}
            dropout: 0.0
            attention_head_dim: {sizes["attention_head_dim"]}
            n_blocks: {sizes["n_blocks"]}
            num_mid_blocks: {sizes["num_mid_blocks"]}
            num_heads: {sizes["num_heads"]}
            act_fn: 'gelu'
"""
