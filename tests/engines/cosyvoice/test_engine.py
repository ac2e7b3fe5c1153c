"""The CosyVoice2 engine on a converted tiny checkpoint: modes, voices, errors, no torch at run time.

The checkpoint is the official layout with random weights (see ``_tiny_checkpoint``), converted by
the converter behind ``python -m cosyedge convert cosyvoice2`` (int8), then loaded through ``cosyedge.engines.loader.load_engine``
the way the app does. The audio is noise; these tests check plumbing, shapes, durations and errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("torch", reason="building the tiny checkpoint needs the reference: scripts/install_reference.sh")
pytestmark = [pytest.mark.reference, pytest.mark.slow]  # builds, converts and runs tiny models (~10-40 s)

from cosyedge.config import Settings  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.engines.base import Engine, SynthesisOptions, VoicePrompt  # noqa: E402
from cosyedge.errors import (AudioError, CancelledError, InputError, NotFoundError, ParameterError,  # noqa: E402
                             TextError)
from tests.helpers.cosyvoice_tiny import PRESET_NAMES, converted_models_dir, tiny_source_dir  # noqa: E402

MODEL_ID = "cosyvoice2-tiny"
LONG_TEXT = ("The quick brown fox jumps over the lazy dog while the tiny tokenizer reads this sentence. "
             "Hello world, this is a tiny test. " * 2 + "Speech synthesis on a small edge box is fun to build. "
             "Read this slowly and warmly, please.")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return converted_models_dir(tmp_path_factory, MODEL_ID)


@pytest.fixture(scope="module")
def engine(models_dir):
    eng = load_engine(Settings(models_dir=models_dir, model=MODEL_ID, onnx_threads=1))
    yield eng
    eng.close()


def speechlike(seconds: float, sr: int = 24000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(sr * seconds)) / sr
    return (0.3 * np.sin(2 * np.pi * 150 * t * (1 + 0.2 * np.sin(3 * t))) + 0.01 * rng.normal(size=t.size)
            ).astype(np.float32)


@pytest.fixture(scope="module")
def prompt(engine):
    return engine.encode_prompt(speechlike(3.0), 24000, "Hello world, this is a tiny test.")


def test_manifest_lists_llm_and_frontend_files(models_dir):
    manifest = json.loads((models_dir / MODEL_ID / "manifest.json").read_text(encoding="utf-8"))
    files = manifest["files"]
    for name in ("llm.onnx", "llm.onnx.data", "llm_text_embedding.npy", "llm_text_embedding_scale.npy",
                 "llm_speech_embedding.npy", "llm_speech_embedding_scale.npy", "llm_special_embedding.npy", "llm_config.json", "tokenizer/vocab.json", "tokenizer/merges.txt",
                 "campplus.onnx", "speech_tokenizer_v2.onnx", "speech_tokenizer_v2.onnx.data", "spk2info.npz"):
        assert name in files and files[name]["sha256"], name
    assert manifest["config"]["llm"]["eos"] == 6561
    assert manifest["graphs"]["llm"]["precision"].startswith("int8")
    # --quantize int8 stores the flow/HiFT graphs' remaining float32 weights as float16.
    for name in ("flow_encoder.onnx", "flow_estimator.onnx", "hift_f0.onnx", "hift_decoder.onnx"):
        storage = manifest["graphs"][name]["weight_storage"]
        assert storage["float16_tensors"] > 0 and storage["bytes_after"] < storage["bytes_before"], name
        assert files[name]["bytes"] == storage["bytes_after"]


def test_prompt_encoder_is_released_after_each_use(engine, prompt):
    """campplus + the speech tokenizer are not kept next to the LLM and flow between clone requests."""
    assert not engine.prompt_encoder_loaded
    engine.keep_prompt_encoder = True
    try:
        again = engine.encode_prompt(speechlike(3.0), 24000, "Hello world, this is a tiny test.")
        assert engine.prompt_encoder_loaded
        np.testing.assert_array_equal(again.arrays["tokens"], prompt.arrays["tokens"])
    finally:
        engine.keep_prompt_encoder = False
        engine.release_prompt_encoder()
    assert not engine.prompt_encoder_loaded


def test_llm_is_released_for_a_new_voice_and_reopened_with_the_same_output(engine, prompt):
    """The LLM is not resident next to the speech tokenizer, and reopening it changes nothing."""
    before, _ = _run(engine, "Hello world.", prompt, seed=3)
    engine.encode_prompt(speechlike(2.0, seed=9), 24000, None)
    assert not engine.lm_loaded  # released while the prompt encoders ran
    after, _ = _run(engine, "Hello world.", prompt, seed=3)
    assert engine.lm_loaded  # the sentence reopened it
    np.testing.assert_array_equal(before[0].audio, after[0].audio)


def test_llm_in_use_is_not_released(engine, prompt):
    with engine.using_lm():  # as a synthesis on the other worker holds it
        assert engine.lm_users == 1
        engine.encode_prompt(speechlike(2.0, seed=9), 24000, None)
        assert engine.lm_loaded
    assert engine.lm_users == 0


def test_engine_protocol_and_capabilities(engine):
    assert isinstance(engine, Engine)
    assert engine.name == "cosyvoice2" and engine.model_id == MODEL_ID
    assert engine.capabilities.native_clone and engine.capabilities.native_instruct
    from cosyedge.catalog.abilities import NATIVE_ABILITIES  # what the page says before the engine loads

    assert NATIVE_ABILITIES[engine.name] == (engine.capabilities.native_clone,
                                             engine.capabilities.native_instruct)
    assert engine.capabilities.sample_rate == 24000
    assert engine.presets() == sorted(PRESET_NAMES)
    # /voices' preset_details: each SFT speaker, in every language the model reads
    assert [(d.name, d.made_of) for d in engine.capabilities.preset_details] == [
        (name, {lang: {"speaker": name} for lang in ("zh", "en", "ja")}) for name in sorted(PRESET_NAMES)]
    assert engine.version == 2 and engine.format_instruction("slowly") == "slowly<|endofprompt|>"


def test_a_model_converted_before_the_family_schema_loads_unchanged(models_dir, tmp_path, prompt):
    """Today's manifests name only ``"engine": "cosyvoice2"``: same engine name, so the voices
    encoded for it (and the prompt cache's keys) still fit."""
    import shutil

    models = tmp_path / "models"
    shutil.copytree(models_dir / MODEL_ID, models / MODEL_ID)
    path = models / MODEL_ID / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    assert (manifest["engine"], manifest["family"], manifest["version"]) == ("cosyvoice2", "cosyvoice", 2)
    del manifest["family"], manifest["version"]
    path.write_text(json.dumps(manifest), encoding="utf-8")
    old = load_engine(Settings(models_dir=models, model=MODEL_ID, onnx_threads=1))
    try:
        assert (old.name, old.model_id, old.version) == ("cosyvoice2", MODEL_ID, 2)
        chunks, _ = _run(old, "Hello world.", prompt, seed=3)  # a voice encoded by the other engine object
        assert chunks and chunks[0].audio.size > 0
    finally:
        old.close()


def test_encode_prompt_is_aligned_and_serializable(engine, prompt):
    assert prompt.engine == "cosyvoice2" and prompt.model_id == MODEL_ID
    tokens, mel, emb = prompt.arrays["tokens"], prompt.arrays["mel"], prompt.arrays["embedding"]
    assert emb.shape == (192,) and mel.shape == (2 * tokens.size, 80)
    assert 60 <= tokens.size <= 76  # 25 tokens/s of a 3 s prompt (the stand-in takes every 4th frame)
    assert prompt.meta["transcript"]
    again = VoicePrompt.from_bytes(prompt.to_bytes())
    assert again.meta == prompt.meta
    np.testing.assert_array_equal(again.arrays["tokens"], tokens)
    # The same audio at another rate gives nearly the same tokens count and the same shapes.
    other = engine.encode_prompt(speechlike(3.0, sr=16000), 16000, None)
    assert other.meta["transcript"] is None and abs(other.arrays["tokens"].size - tokens.size) <= 2


def _run(engine, text, voice, **opts):
    progress = []
    chunks = list(engine.synthesize(text, voice, SynthesisOptions(**opts), progress=lambda d, t: progress.append((d, t))))
    return chunks, progress


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "instruct2", "sft"])
def test_each_mode_yields_one_chunk_per_sentence(engine, prompt, mode):
    voice = {"zero_shot": prompt, "instruct2": prompt, "sft": PRESET_NAMES[0],
             "cross_lingual": engine.encode_prompt(speechlike(2.0, seed=5), 24000, None)}[mode]
    instruct = "Read this slowly and warmly." if mode == "instruct2" else None
    chunks, progress = _run(engine, LONG_TEXT, voice, seed=1, instruct=instruct)
    pieces = engine.normalizer.split(LONG_TEXT)
    assert len(pieces) == 2  # upstream's split: pieces of up to 80 tokens
    assert [c.text for c in chunks] == pieces
    assert [(c.index, c.total) for c in chunks] == [(0, 2), (1, 2)] and progress == [(1, 2), (2, 2)]
    for chunk in chunks:
        assert chunk.sample_rate == 24000 and chunk.audio.dtype == np.float32
        assert chunk.audio.size > 0 and chunk.audio.size % 480 == 0
        assert np.isfinite(chunk.audio).all() and np.abs(chunk.audio).max() <= 1.0
        # 25 tokens/s, at least 2 tokens per text token: the sentence is at least a few tenths of a second.
        assert chunk.audio.size / 24000 >= 0.1


def test_seed_makes_synthesis_repeatable(engine, prompt):
    a, _ = _run(engine, "Hello world.", prompt, seed=7)
    b, _ = _run(engine, "Hello world.", prompt, seed=7)
    c, _ = _run(engine, "Hello world.", prompt, seed=8)
    np.testing.assert_array_equal(a[0].audio, b[0].audio)
    assert a[0].audio.shape != c[0].audio.shape or not np.array_equal(a[0].audio, c[0].audio)


def test_synthesize_reads_its_own_analysis_as_it_reads_the_text(engine, prompt):
    analysis = engine.analyze(LONG_TEXT, "en")
    assert analysis.sentences == tuple(engine.normalizer.split(LONG_TEXT))
    assert analysis.skipped == () and analysis.notes == ()
    from_text, _ = _run(engine, LONG_TEXT, prompt, seed=3)
    from_analysis, _ = _run(engine, analysis, prompt, seed=3)
    for a, b in zip(from_analysis, from_text, strict=True):
        assert a.text == b.text
        np.testing.assert_array_equal(a.audio, b.audio)
    with pytest.raises(TextError, match="nothing to speak"):
        engine.analyze("。！？")


def test_speed_changes_duration(engine, prompt):
    slow, _ = _run(engine, "Hello world.", prompt, seed=3, speed=0.5)
    normal, _ = _run(engine, "Hello world.", prompt, seed=3, speed=1.0)
    assert slow[0].audio.size == pytest.approx(2 * normal[0].audio.size, rel=0.05)
    with pytest.raises(ParameterError):
        _run(engine, "Hello world.", prompt, speed=3.0)


def test_bad_requests_are_clear_errors(engine, prompt):
    with pytest.raises(TextError):
        _run(engine, "   ", prompt)
    with pytest.raises(TextError):
        _run(engine, "。！？", prompt)
    with pytest.raises(NotFoundError, match="preset"):
        _run(engine, "Hello.", "nobody")
    with pytest.raises(ParameterError, match="voice"):
        _run(engine, "Hello.", "")
    foreign = VoicePrompt(engine="kokoro", model_id="kokoro-int8", arrays={"style": np.zeros(256)})
    with pytest.raises(ParameterError, match="kokoro"):
        _run(engine, "Hello.", foreign)
    with pytest.raises(ParameterError, match="lacks"):
        _run(engine, "Hello.", VoicePrompt(engine="cosyvoice2", model_id=MODEL_ID, arrays={}))
    with pytest.raises(ParameterError, match="instruction"):
        _run(engine, "Hello.", prompt, instruct="x" * 600)


def test_bad_prompt_audio_is_an_audio_error(engine):
    with pytest.raises(AudioError, match="30"):
        engine.encode_prompt(speechlike(31.0, sr=16000), 16000, None)
    with pytest.raises(AudioError, match="at least"):
        engine.encode_prompt(speechlike(0.2), 24000, None)
    bad = speechlike(2.0)
    bad[10] = np.nan
    with pytest.raises(AudioError, match="NaN"):
        engine.encode_prompt(bad, 24000, None)


def test_cancel_stops_between_sentences(engine, prompt):
    calls = {"n": 0}

    def cancelled():
        calls["n"] += 1
        return calls["n"] > 30  # lets the first sentence finish, stops inside or before the second

    gen = engine.synthesize("Hello world. The quick brown fox. Another one.", prompt,
                            SynthesisOptions(seed=1), cancelled=cancelled)
    with pytest.raises(CancelledError):
        list(gen)


def test_engine_runs_with_torch_blocked(models_dir, tmp_path):
    """Nothing under cosyedge/engines imports torch: load and synthesize in a process that forbids it."""
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")
        sys.meta_path.insert(0, Block())
        import numpy as np
        from cosyedge.config import Settings
        from cosyedge.engines.loader import load_engine
        from cosyedge.engines.base import SynthesisOptions
        eng = load_engine(Settings(models_dir={str(models_dir)!r}, model={MODEL_ID!r}, onnx_threads=1))
        t = np.arange(48000) / 24000
        voice = eng.encode_prompt((0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), 24000, "Hello world.")
        chunks = list(eng.synthesize("Hello there.", voice, SynthesisOptions(seed=0)))
        assert chunks and chunks[0].audio.size > 0
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
        print("ok", chunks[0].audio.size)
    """)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


def test_converter_can_store_the_speech_tokenizer_int8(tmp_path_factory, tmp_path):
    """``--speech-tokenizer-int8``: the copied tokenizer shrinks, the manifest records it, the engine reads it."""
    from cosyedge.export.cosyvoice.v2.convert import convert

    src = tiny_source_dir(tmp_path_factory)
    manifest = convert(src, tmp_path / "m", quantize="int8", steps=["frontend"],
                       options={"speech_tokenizer_int8": True})
    record = manifest["graphs"]["speech_tokenizer_v2.onnx"]
    assert record["precision"] == "int8" and record["bytes_int8"] < 0.4 * record["bytes_fp32"]
    stored = sum(manifest["files"][n]["bytes"] for n in ("speech_tokenizer_v2.onnx", "speech_tokenizer_v2.onnx.data"))
    assert stored < 0.45 * record["bytes_fp32"]
    assert (src / "speech_tokenizer_v2.onnx").stat().st_size == record["bytes_fp32"]  # the source is untouched
    with pytest.raises(InputError, match="needs --quantize int8"):
        convert(src, tmp_path / "n", quantize="none", steps=["frontend"], options={"speech_tokenizer_int8": True})


def _damaged_copy(models_dir, tmp_path, name: str):
    """``models/<id>`` copied with ``name`` damaged in place (same size: the load-time size check passes)."""
    import shutil

    models = tmp_path / "models"
    shutil.copytree(models_dir / MODEL_ID, models / MODEL_ID)
    data = bytearray((models / MODEL_ID / name).read_bytes())
    data[10::97] = bytes(b ^ 0xFF for b in data[10::97])
    (models / MODEL_ID / name).write_bytes(bytes(data))
    return models


def test_damaged_graph_names_the_file_and_the_fix(models_dir, tmp_path):
    """A bad copy to the box: the load (or the clone that opens campplus) says which file, not protobuf."""
    from cosyedge.engines.cosyvoice.common.manifest import ModelDir
    from cosyedge.errors import ModelMissingError

    models = _damaged_copy(models_dir, tmp_path, "llm.onnx")
    with pytest.raises(ModelMissingError, match=r"llm\.onnx is corrupt \(sha256 mismatch\).*cosyedge convert"):
        load_engine(Settings(models_dir=models, model=MODEL_ID, onnx_threads=1))
    models = _damaged_copy(models_dir, tmp_path / "b", "campplus.onnx")
    with pytest.raises(ModelMissingError, match=r"campplus\.onnx does not match its sha256.*--force"):
        ModelDir.load(models / MODEL_ID).session("campplus.onnx")


def test_unknown_model_id_lists_the_models_there(models_dir):
    from cosyedge.errors import ModelMissingError

    with pytest.raises(ModelMissingError, match=f"no model at .*cosyvoice2_tiny.*pick a model that is there: {MODEL_ID}"):
        load_engine(Settings(models_dir=models_dir, model="cosyvoice2_tiny", onnx_threads=1))
