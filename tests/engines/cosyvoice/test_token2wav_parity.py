"""Parity of our converter + onnxruntime runtime against upstream CosyVoice2 PyTorch (flow + HiFT).

One shrunken random-weight model (same structure as CosyVoice2-0.5B, tiny widths; see
``_reference.PRESETS['tiny']``) is built with the upstream classes, saved in the official layout,
converted with our CLI (fp32 and int8), and compared stage by stage.

Tolerances (all fp32 against fp32; the outputs are O(1) - mel about +-5, waveform about +-0.1):

* encoder ``mu``/``spks``, one estimator call: 1e-4 absolute. Reordered fp32 sums in onnxruntime give
  ~1e-6; any structural error (a wrong mask, position, norm or weight) gives errors of order 0.1-1.
* mel after the full 10-step CFM from the same noise: 1e-3 absolute, i.e. the per-call error carried
  through 10 Euler steps (measured ~1e-5).
* F0: 1e-3 Hz on values around 150 Hz. HiFT waveform from the same source: 1e-4 (measured ~1e-7).
* harmonic source from the same noise: 5e-3. The phase is a float32 cumulative sum reaching ~1e3 rad
  in this clip, where one float32 ulp is ~1e-4 rad and sin() implementations differ by an ulp.
* int8 against fp32 is a quality figure, not parity: SNR is reported and must stay above 15 dB on
  these random weights (a broken quantization gives ~0 dB or less).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cosyvoice_reference as ref
from tests.helpers import REPO

ref.install_shim()  # fails with the install command when the reference stack is missing
import torch  # noqa: E402

pytestmark = [pytest.mark.reference, pytest.mark.slow]

N_TOKENS, N_PROMPT = 20, 8


def _run_convert(src: Path, out: Path, *extra: str) -> int:
    """Run the `convert` command the way the CLI does (only this command registered)."""
    from cosyedge.commands import convert
    parser = argparse.ArgumentParser()
    convert.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["convert", "cosyvoice2", "--src", str(src), "--out", str(out), *extra])
    return args.func(args)


@pytest.fixture(scope="module")
def upstream():
    flow = ref.build_flow("tiny", seed=0)
    hift = ref.build_hift("tiny", seed=0)
    return flow, hift


@pytest.fixture(scope="module")
def model_dirs(upstream, tmp_path_factory):
    flow, hift = upstream
    root = tmp_path_factory.mktemp("cosyvoice2_tiny")
    src = ref.write_model_dir(root / "src", flow, hift, size="tiny")
    # Only the parts this file tests: the LLM/frontend steps need llm.pt and the frontend files.
    assert _run_convert(src, root / "fp32", "--steps", "flow,hift") == 0
    assert _run_convert(src, root / "int8", "--quantize", "int8", "--steps", "flow,hift") == 0
    return {"src": src, "fp32": root / "fp32", "int8": root / "int8"}


@pytest.fixture(scope="module")
def runtimes(model_dirs):
    from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
    return {name: Token2Wav.load(model_dirs[name], threads=2, verify_hashes=True) for name in ("fp32", "int8")}


@pytest.fixture(scope="module")
def inputs():
    gen = torch.Generator().manual_seed(7)
    return {
        "tokens": torch.randint(0, 6561, (1, N_TOKENS), generator=gen),
        "prompt_tokens": torch.randint(0, 6561, (1, N_PROMPT), generator=gen),
        "prompt_feat": torch.randn(1, 2 * N_PROMPT, 80, generator=gen) * 2 - 4,
        "embedding": torch.randn(1, 192, generator=gen),
    }


def _i32(value: int):
    return torch.tensor([value], dtype=torch.int32)


@pytest.fixture(scope="module")
def upstream_mel(upstream, inputs):
    flow, _ = upstream
    with torch.no_grad():
        mel, _ = flow.inference(
            token=inputs["tokens"], token_len=_i32(N_TOKENS), prompt_token=inputs["prompt_tokens"],
            prompt_token_len=_i32(N_PROMPT), prompt_feat=inputs["prompt_feat"],
            prompt_feat_len=_i32(2 * N_PROMPT), embedding=inputs["embedding"], streaming=False, finalize=True)
    return mel[0].numpy()


def _np_inputs(inputs):
    return (inputs["tokens"][0].numpy(), inputs["prompt_tokens"][0].numpy(), inputs["prompt_feat"][0].numpy(),
            inputs["embedding"][0].numpy())


def test_manifest_lists_every_file_with_sha256(model_dirs):
    from cosyedge.catalog.manifest import sha256_file
    for name in ("fp32", "int8"):
        directory = model_dirs[name]
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["engine"] == "cosyvoice2"
        on_disk = {p.name for p in directory.iterdir()} - {"manifest.json"}
        assert set(manifest["files"]) == on_disk
        for fname, info in manifest["files"].items():
            assert info["sha256"] == sha256_file(directory / fname)
        assert manifest["quantization"] == name
        assert set(manifest["source"]["files"]) == {"flow.pt", "hift.pt", "cosyvoice2.yaml"}


def test_stored_noise_is_upstream_rand_noise(upstream, runtimes):
    flow, _ = upstream
    np.testing.assert_array_equal(runtimes["fp32"].flow.noise, flow.decoder.rand_noise[0].numpy())


def test_encoder_matches_upstream(upstream, runtimes, inputs):
    flow, _ = upstream
    tokens = torch.cat([inputs["prompt_tokens"], inputs["tokens"]], dim=1)
    with torch.no_grad():
        h, _ = flow.encoder(flow.input_embedding(tokens), _i32(tokens.shape[1]))
        mu_ref = flow.encoder_proj(h).transpose(1, 2)[0].numpy()
        spks_ref = flow.spk_embed_affine_layer(torch.nn.functional.normalize(inputs["embedding"], dim=1))
    mu, spks = runtimes["fp32"].flow.encode(tokens[0].numpy(), inputs["embedding"][0].numpy())
    assert mu.shape == (80, 2 * tokens.shape[1])
    np.testing.assert_allclose(mu, mu_ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(spks, spks_ref[0].numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("n_frames", [7, 56])
def test_single_estimator_call_matches_upstream(upstream, runtimes, n_frames):
    flow, _ = upstream
    gen = torch.Generator().manual_seed(n_frames)
    x, mu, cond = (torch.randn(2, 80, n_frames, generator=gen) for _ in range(3))
    mask, t, spks = torch.ones(2, 1, n_frames), torch.rand(2, generator=gen), torch.randn(2, 80, generator=gen)
    with torch.no_grad():
        expected = flow.decoder.estimator(x, mask, mu, t, spks, cond).numpy()
    got = runtimes["fp32"].flow.estimate(x.numpy(), mu.numpy(), t.numpy(), spks.numpy(), cond.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_full_cfm_mel_matches_upstream(runtimes, inputs, upstream_mel):
    mel = runtimes["fp32"].mel(*_np_inputs(inputs))
    assert mel.shape == (80, 2 * N_TOKENS)
    np.testing.assert_allclose(mel, upstream_mel, atol=1e-3, rtol=0)


def test_fewer_steps_changes_the_mel(runtimes, inputs, upstream_mel):
    """The step count really reaches the solver (5 steps is a different trajectory)."""
    mel5 = runtimes["fp32"].mel(*_np_inputs(inputs), n_timesteps=5)
    assert np.abs(mel5 - upstream_mel).max() > 1e-2


@pytest.mark.parametrize("speed", [0.5, 0.8, 1.3, 2.0])
def test_speed_resamples_mel_like_upstream(runtimes, inputs, upstream_mel, speed):
    ref_mel = torch.nn.functional.interpolate(torch.from_numpy(upstream_mel)[None],
                                              size=int(upstream_mel.shape[1] / speed), mode="linear")[0]
    mel = runtimes["fp32"].mel(*_np_inputs(inputs), speed=speed)
    np.testing.assert_allclose(mel, ref_mel.numpy(), atol=1e-3, rtol=0)


def test_hift_f0_source_and_waveform_match_upstream(upstream, runtimes, upstream_mel):
    _, hift = upstream
    vocoder = runtimes["fp32"].vocoder
    wav_ref, source_ref, noise = ref.upstream_hift_capturing_noise(hift, upstream_mel)
    with torch.no_grad():
        f0_ref = hift.f0_predictor(torch.from_numpy(upstream_mel)[None])[0].numpy()
    assert f0_ref.min() > 10, "test needs voiced frames (the builder biases F0 to ~150 Hz)"
    np.testing.assert_allclose(vocoder.f0(upstream_mel), f0_ref, atol=1e-3, rtol=0)
    source = vocoder.source(upstream_mel, noise=noise)
    np.testing.assert_allclose(source, source_ref, atol=5e-3, rtol=0)
    wav = vocoder.decode(upstream_mel, source_ref)
    assert wav.shape == (480 * upstream_mel.shape[1],)
    np.testing.assert_allclose(wav, wav_ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(vocoder(upstream_mel, noise=noise), wav_ref, atol=1e-3, rtol=0)


def test_unvoiced_hift_matches_upstream(runtimes, upstream_mel):
    """Random F0 weights without the bias give F0 < 10 Hz: the noise-only source branch."""
    hift = ref.build_hift("tiny", seed=0, f0_bias=0.0)
    vocoder = runtimes["fp32"].vocoder
    _, source_ref, noise = ref.upstream_hift_capturing_noise(hift, upstream_mel)
    # The converted model has the biased F0 head, so check the source generator alone on this F0.
    from cosyedge.engines.cosyvoice.common.hift import excitation
    with torch.no_grad():
        f0 = hift.f0_predictor(torch.from_numpy(upstream_mel)[None])[0].numpy()
    assert f0.max() < 10, "this test wants unvoiced frames"
    state = hift.state_dict()
    got = excitation(f0, noise, state["m_source.l_linear.weight"].numpy(),
                     state["m_source.l_linear.bias"].numpy(), vocoder.params)
    np.testing.assert_allclose(got, source_ref, atol=1e-5, rtol=0)


def test_token2wav_end_to_end(runtimes, inputs):
    audio = runtimes["fp32"](*_np_inputs(inputs), rng=np.random.default_rng(0))
    assert audio.dtype == np.float32 and audio.shape == (480 * 2 * N_TOKENS,)
    assert np.abs(audio).max() <= 0.99 and np.abs(audio).max() > 1e-4
    assert runtimes["fp32"].sample_rate == 24000


def test_int8_deviation_from_fp32(runtimes, model_dirs, inputs):
    from cosyedge.export.cosyvoice.common.quantize import snr_db
    manifest = json.loads((model_dirs["int8"] / "manifest.json").read_text())
    graphs = manifest["graphs"]
    assert graphs["flow_estimator.onnx"]["precision"] == "int8"
    assert graphs["hift_f0.onnx"]["precision"] == "fp32"
    for info in graphs.values():
        for value in info.get("snr_db_vs_fp32", {}).values():
            assert value > 20.0
    mel32 = runtimes["fp32"].mel(*_np_inputs(inputs))
    mel8 = runtimes["int8"].mel(*_np_inputs(inputs))
    noise = np.random.default_rng(1).standard_normal((480 * mel32.shape[1], 9), dtype=np.float32)
    wav32 = runtimes["fp32"].vocoder(mel32, noise=noise)
    wav8 = runtimes["int8"].vocoder(mel8, noise=noise)
    mel_snr, wav_snr = snr_db(mel32, mel8), snr_db(wav32, wav8)
    print(f"int8 vs fp32 (tiny random weights): mel SNR {mel_snr:.1f} dB, waveform SNR {wav_snr:.1f} dB")
    assert mel_snr > 15.0
    assert np.isfinite(wav8).all()


def test_bad_inputs_are_parameter_errors(runtimes, inputs):
    from cosyedge.errors import ParameterError
    tokens, ptok, pmel, emb = _np_inputs(inputs)
    t2w = runtimes["fp32"]
    with pytest.raises(ParameterError):
        t2w(np.array([], dtype=np.int64), ptok, pmel, emb)
    with pytest.raises(ParameterError):
        t2w(np.array([6561]), ptok, pmel, emb)
    with pytest.raises(ParameterError):
        t2w(tokens, ptok, pmel, emb[:10])
    with pytest.raises(ParameterError):
        t2w(tokens, ptok, pmel.T, emb)                          # [80, frames] instead of [frames, 80]
    with pytest.raises(ParameterError):
        t2w(tokens, ptok, pmel, emb, n_timesteps=0)
    with pytest.raises(ParameterError):
        t2w(tokens, ptok, pmel, emb, speed=3.0)
    with pytest.raises(ParameterError):
        t2w(np.zeros(7600, dtype=np.int64), ptok, pmel, emb)   # past the 15000-frame noise


_NO_TORCH = textwrap.dedent("""
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
    sys.meta_path.insert(0, Block())
""")


def test_runtime_runs_with_torch_blocked(model_dirs, inputs):
    script = _NO_TORCH + textwrap.dedent(f"""
        import numpy as np
        from cosyedge.engines.cosyvoice.common.token2wav import Token2Wav
        from cosyedge.engines.cosyvoice.common import features
        t2w = Token2Wav.load({str(model_dirs['int8'])!r}, threads=1)
        rng = np.random.default_rng(0)
        audio = t2w(rng.integers(0, 6561, 12), rng.integers(0, 6561, 4),
                    features.prompt_mel(0.1 * rng.standard_normal(8 * 480).astype(np.float32)),
                    rng.standard_normal(192), rng=rng)
        fb = features.campplus_features(0.1 * rng.standard_normal(16000).astype(np.float32))
        assert "torch" not in sys.modules
        print(audio.shape[0], fb.shape)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == str(12 * 2 * 480)


def test_convert_without_torch_names_the_install_command(model_dirs, tmp_path):
    script = _NO_TORCH + textwrap.dedent(f"""
        from cosyedge.errors import CosyedgeError
        from cosyedge.export.cosyvoice.v2.convert import convert
        try:
            convert({str(model_dirs['src'])!r}, {str(tmp_path / 'out')!r})
        except CosyedgeError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "pip install torch==2.13.0" in out.stdout
    assert not (tmp_path / "out").exists()
