"""Hash what the engines say for fixed inputs, so a refactor can prove the audio did not change.

Two parts, each run in the environment that has what it needs:

* ``--part kokoro`` (in ``.venv``): the embedded engine at 1 and 2 threads, fixed texts x the five
  presets, plus the closest built-in voice of a fixed prompt stored in and read back from a prompt
  cache (``closest/voice``: the preset chosen) and then spoken with. Each other entry is the sha256
  of the joined float32 waveform.
* ``--part cosyvoice`` (in ``.venv-ref``: the tiny checkpoints are built with the PyTorch reference):
  the tiny CosyVoice2, CosyVoice-300M (base and SFT) and the committed CosyVoice3 fixture, each
  converted with int8, then a preset (where the model has presets) and a zero-shot clone at a fixed
  seed; the sha256 of every sentence's speech tokens and of the joined audio.
* ``--part cosyvoice1`` (in ``.venv-ref``, as above): the tiny CosyVoice-300M-Instruct checkpoint
  converted with int8, then an SFT preset, a preset with an instruction, a zero-shot and a
  cross-lingual clone at a fixed seed; the same two hashes per case.

Usage::

    .venv/bin/python scripts/fingerprint_outputs.py --part kokoro -o /tmp/kokoro.json
    .venv-ref/bin/python scripts/fingerprint_outputs.py --part cosyvoice -o /tmp/cosy.json
    .venv-ref/bin/python scripts/fingerprint_outputs.py --part cosyvoice1 -o /tmp/cosy1.json
    python3 scripts/fingerprint_outputs.py --compare before.json after.json

``--compare`` prints every entry that differs and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
KOKORO_TEXTS = {
    "zh": "今天天气真好，我们去公园散步吧。",
    "en": "Every spring, the school goes to the hills. It is 9:30 now!",
    "ja": "今日はいい天気ですね。",
    "mixed": "[zh]今天天气真好[en]It's sunny today",
}
COSY_TEXTS = {
    "preset": "Hello world. The quick brown fox!",
    "clone": "你好，世界。今天天气真好！",
}
COSY1_CASES = {  # name -> (text, voice: a preset name or "clone" / "cross", instruction)
    "preset": ("Hello world. The quick brown fox!", "中文女", None),
    "instruct": ("你好，世界。今天天气真好！", "英文男", "Read it slowly and warmly."),
    "clone": ("你好，世界。今天天气真好！", "clone", None),
    "cross": ("Hello world. The quick brown fox!", "cross", None),
}
SEED = 1234


def _sha(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _prompt_wave(sample_rate: int) -> np.ndarray:
    """A fixed voiced 4 s prompt: a gliding harmonic tone with syllable-rate amplitude and noise."""
    t = np.arange(int(4.0 * sample_rate)) / sample_rate
    f0 = 180 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t) ** 2
    noise = np.random.default_rng(7).normal(scale=0.02, size=t.size)
    return (0.2 * voiced * envelope + noise).astype(np.float32)


def kokoro_part() -> dict[str, str]:
    from cosyedge import config
    from cosyedge.audio import condition_prompt_array
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.kokoro import model_files
    from cosyedge.engines.loader import load_engine

    synthesis = _import("cosyedge.service.synthesis", "cosyedge.synthesis")
    PromptCache = _import("cosyedge.voices.library:PromptCache", "cosyedge.voices:PromptCache")

    models = REPO / "models"
    if not (models / model_files.MODEL_ID / "manifest.json").is_file():
        raise SystemExit("models/kokoro-int8 is missing: run scripts/setup.sh first")
    out: dict[str, str] = {}
    prompt = condition_prompt_array(_prompt_wave(24000), 24000)
    for threads in (1, 2):
        engine = load_engine(config.from_env({}, models_dir=models, onnx_threads=threads))
        try:
            for voice in engine.presets():
                for name, text in KOKORO_TEXTS.items():
                    result = synthesis.synthesize(engine, text, voice, SynthesisOptions(), 5000)
                    out[f"kokoro/t{threads}/{voice}/{name}"] = _sha(result.audio)
            with tempfile.TemporaryDirectory() as tmp:
                cache = PromptCache(Path(tmp))
                cache.get_or_encode(engine, prompt, None)  # encodes and stores
                voice = PromptCache(Path(tmp)).get_or_encode(engine, prompt, None)  # read back
                out[f"kokoro/t{threads}/closest/voice"] = str(voice.meta.get("preset_voice"))
                result = synthesis.synthesize(engine, KOKORO_TEXTS["en"], voice, SynthesisOptions(), 5000)
                out[f"kokoro/t{threads}/closest/en"] = _sha(result.audio)
        finally:
            engine.close()
    return out


def _import(*paths: str):
    """The first of ``paths`` ("module:attr") that imports: one script for the layouts before and after a move."""
    import importlib

    for path in paths:
        module, _, attr = path.partition(":")
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        return getattr(found, attr) if attr else found
    raise ModuleNotFoundError(f"none of {paths} imports")


def cosyvoice_part() -> dict[str, str]:
    """Tiny CosyVoice v2, v1 (base, SFT) and v3: speech tokens and audio of a preset and a clone."""
    from cosyedge import config
    from cosyedge.audio import condition_prompt_array
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.loader import load_engine

    synthesis = _import("cosyedge.service.synthesis", "cosyedge.synthesis")
    lm_classes = [_import("cosyedge.engines.cosyvoice.common.llm:SpeechLM", "cosyedge.engines.cosyvoice.llm:SpeechLM"),
                  _import("cosyedge.engines.cosyvoice.v1.llm:SpeechLMv1", "cosyedge.engines.cosyvoice.llm_v1:SpeechLMv1")]
    convert_v2 = _import("cosyedge.export.cosyvoice.v2.convert:convert", "cosyedge.export.cosyvoice2:convert")
    from tests.helpers import cosyvoice1_tiny, cosyvoice3_fixture
    from tests.helpers.cosyvoice_tiny import PRESET_NAMES, write_tiny_checkpoint

    tokens_seen: list[list[int]] = []
    for cls in lm_classes:
        def recording_generate(self, *args, _generate=cls.generate, **kwargs):
            tokens = _generate(self, *args, **kwargs)
            tokens_seen.append(list(tokens))
            return tokens

        cls.generate = recording_generate
    out: dict[str, str] = {}

    def speak(prefix: str, models: Path, model_id: str, voices: dict) -> None:
        engine = load_engine(config.from_env({}, models_dir=models, model=model_id, onnx_threads=1))
        try:
            if "clone" in voices:
                prompt = condition_prompt_array(_prompt_wave(16000), 16000)
                voices = {**voices, "clone": engine.encode_prompt(prompt.pcm, prompt.sample_rate, "大家好，我是老师。")}
            for name, voice in voices.items():
                tokens_seen.clear()
                result = synthesis.synthesize(engine, COSY_TEXTS[name], voice, SynthesisOptions(seed=SEED), 5000)
                out[f"{prefix}{name}/tokens"] = hashlib.sha256(json.dumps(tokens_seen).encode()).hexdigest()
                out[f"{prefix}{name}/audio"] = _sha(result.audio)
        finally:
            engine.close()

    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        src = write_tiny_checkpoint(Path(tmp) / "src" / "CosyVoice2-0.5B")["dir"]
        convert_v2(src, models / "cosyvoice2-tiny", quantize="int8")
        speak("cosyvoice/", models, "cosyvoice2-tiny", {"preset": PRESET_NAMES[1], "clone": None})
        cosyvoice1_tiny.convert_all(Path(tmp) / "src1", models)
        speak("cosyvoice1/sft/", models, "cosyvoice1-sft-tiny", {"preset": "英文男"})
        speak("cosyvoice1/base/", models, "cosyvoice1-tiny", {"clone": None})
        source = cosyvoice3_fixture.write_official_dir(Path(tmp) / "src3" / "Fun-CosyVoice3-0.5B")
        convert_v3 = _import("cosyedge.export.cosyvoice.v3.convert:convert", "cosyedge.export.cosyvoice3:convert")
        convert_v3(source, models / "cosyvoice3-tiny", quantize="int8")
        speak("cosyvoice3/", models, "cosyvoice3-tiny", {"clone": None})
    return out


def cosyvoice1_part() -> dict[str, str]:
    from cosyedge import config
    from cosyedge.service import synthesis
    from cosyedge.audio import condition_prompt_array
    from cosyedge.engines.loader import load_engine
    from cosyedge.engines.base import SynthesisOptions
    from cosyedge.engines.cosyvoice.v1 import llm
    from cosyedge.export.cosyvoice.v1.convert import convert
    from tests.helpers.cosyvoice1_tiny import write_checkpoints

    tokens_seen: list[list[int]] = []
    generate = llm.SpeechLMv1.generate

    def recording_generate(self, *args, **kwargs):
        tokens = generate(self, *args, **kwargs)
        tokens_seen.append(list(tokens))
        return tokens

    llm.SpeechLMv1.generate = recording_generate
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = write_checkpoints(Path(tmp) / "src")["CosyVoice-300M-Instruct"]
        models = Path(tmp) / "models"
        convert(src, models / "cosyvoice1-tiny", quantize="int8")
        engine = load_engine(config.from_env({}, models_dir=models, model="cosyvoice1-tiny", onnx_threads=1))
        try:
            prompt = condition_prompt_array(_prompt_wave(16000), 16000)
            voices = {"clone": engine.encode_prompt(prompt.pcm, prompt.sample_rate, "大家好，我是老师。"),
                      "cross": engine.encode_prompt(prompt.pcm, prompt.sample_rate, None)}
            for name, (text, voice, instruction) in COSY1_CASES.items():
                tokens_seen.clear()
                options = SynthesisOptions(seed=SEED, instruct=engine.format_instruction(instruction)
                                           if instruction else None)
                result = synthesis.synthesize(engine, text, voices.get(voice, voice), options, 5000)
                out[f"cosyvoice1/{name}/tokens"] = hashlib.sha256(json.dumps(tokens_seen).encode()).hexdigest()
                out[f"cosyvoice1/{name}/audio"] = _sha(result.audio)
        finally:
            engine.close()
    return out


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    for key in differ:
        print(f"DIFFERS {key}: {a.get(key)} -> {b.get(key)}")
    print(f"{len(a.keys() & b.keys()) - len([k for k in differ if k in a and k in b])} identical, "
          f"{len(differ)} different")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("kokoro", "cosyvoice", "cosyvoice1"))
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.part:
        parser.error("give --part or --compare")
    sys.path.insert(0, str(REPO))  # run as a script: the checkout's package, not an installed one
    hashes = {"kokoro": kokoro_part, "cosyvoice": cosyvoice_part, "cosyvoice1": cosyvoice1_part}[args.part]()
    text = json.dumps(hashes, indent=1, sort_keys=True)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
