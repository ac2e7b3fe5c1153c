"""cosyedge.instruct.plan: instructions -> explicit plans, and applying a plan to a request.

The table's expected numbers follow the rules in the module docstring: slow ×0.8, fast ×1.25,
pitch ±3 st, volume ±6 dB; slight ×0.5, strong ×1.5, extreme ×2 (powers for speed, linear for st/dB);
negation = slight move the other way; the last cue per control wins; explicit words override the
matching part of an emotion.
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial

import numpy as np
import pytest

from cosyedge.engines.base import Capabilities, SynthesisOptions, VoicePrompt
from cosyedge.engines.cosyvoice.common.instruct_format import format_instruction
from cosyedge.errors import ParameterError
from cosyedge.instruct.plan import (
    EMOTION_EFFECTS,
    MAX_INSTRUCTION_CHARS,
    InstructPlan,
    apply_plan,
    plan,
    postprocess,
)

EMBEDDED = Capabilities(native_clone=False, native_instruct=False, languages=("auto", "zh", "en", "ja"),
                        sample_rate=24000)
NATIVE = Capabilities(native_clone=True, native_instruct=True, languages=("auto", "zh", "en", "ja"),
                      sample_rate=24000)
PRESETS = ("female_1", "female_2", "male_1", "male_2", "child")
COSYVOICE2_FORMAT = partial(format_instruction, version=2)

SLOW, FAST = 0.8, 1.25

# (instruction, expected controls; "ns" = substrings that must each appear in not_supported, and
#  not_supported must be empty when "ns" is absent; "applied" = substrings that must appear in applied)
CASES: list[tuple[str, dict]] = [
    # --- English
    ("read it slowly", {"speed": SLOW}),
    ("Read it a bit faster", {"speed": FAST ** 0.5}),
    ("very slowly", {"speed": SLOW ** 1.5}),
    ("extremely fast", {"speed": FAST ** 2}),
    ("speak loudly", {"gain": 6.0}),
    ("a little quieter", {"gain": -3.0}),
    ("in a low voice", {"pitch": -3.0}),
    ("with a high-pitched voice", {"pitch": 3.0}),
    ("don't read too fast", {"speed": SLOW ** 0.5}),
    ("not too loud", {"gain": -3.0}),
    ("use a male voice", {"voice": "male_1"}),
    ("a child's voice", {"voice": "child"}),
    ("in a woman's voice, calmly", {"voice": "female_1", "emotions": ("calm",), "speed": 0.92,
                                    "gain": -1.0}),
    ("happily", {"emotions": ("happy",), "speed": 1.08, "pitch": 1.0}),
    ("sadly", {"emotions": ("sad",), "speed": 0.88, "pitch": -1.0, "gain": -3.0}),
    ("angrily and loudly", {"emotions": ("angry",), "speed": 1.08, "gain": 6.0,
                            "applied": ["volume left to 'loudly'"]}),
    ("whisper it", {"emotions": ("whisper",), "gain": -8.0, "ns": ["whisper"]}),
    ("in a British accent", {"ns": ["accent: british accent", "not supported by this engine"]}),
    ("sing it", {"ns": ["singing"]}),
    ("slow and fast", {"speed": FAST, "ns": ["conflict: 'slow' ignored"]}),
    ("fast, no, slowly", {"speed": SLOW, "ns": ["conflict: 'fast' ignored"]}),
    ("1.5x speed", {"speed": 1.5}),
    ("talk like a robot", {"ns": ["style: like a robot"]}),
    ("hello there", {"ns": ["nothing applied"]}),
    ("read it in English", {"language": "en"}),
    ("say it in Korean", {"ns": ["language: Korean"]}),
    ("very happy", {"emotions": ("happy",), "speed": 1.08 ** 1.5, "pitch": 1.5}),
    ("happy but slowly", {"emotions": ("happy",), "speed": SLOW, "pitch": 1.0,
                          "applied": ["speed left to 'slowly'"]}),
    ("read it slowly and warmly", {"emotions": ("gentle",), "speed": SLOW, "gain": -2.0}),
    ("kind of slow", {"speed": SLOW ** 0.5}),
    ("an old man telling a story", {"speed": 0.9, "pitch": -1.0, "ns": ["elderly"]}),
    ("neither too loud nor too soft", {}),
    ("speak neither fast nor slow, with a deep voice", {"pitch": -3.0}),
    ("just happy, not sad", {"emotions": ("happy",), "speed": 1.08, "pitch": 1.0,
                             "applied": ["not sad"]}),
    # --- Chinese
    ("用四川话说", {"ns": ["dialect: Sichuanese (not supported by this engine)"]}),
    ("慢一点", {"speed": SLOW ** 0.5}),
    ("不要太快", {"speed": SLOW ** 0.5}),
    ("非常慢", {"speed": SLOW ** 1.5}),
    ("大声一点", {"gain": 3.0}),
    ("小声地说", {"gain": -6.0}),
    ("低声说", {"gain": -6.0}),
    ("用低沉的声音", {"pitch": -3.0}),
    ("声音高一点", {"pitch": 1.5}),
    ("用男声", {"voice": "male_1"}),
    ("用女声读", {"voice": "female_1"}),
    ("用孩子的声音", {"voice": "child"}),
    ("用开心的语气说", {"emotions": ("happy",), "speed": 1.08, "pitch": 1.0}),
    ("伤心地读", {"emotions": ("sad",), "speed": 0.88, "pitch": -1.0, "gain": -3.0}),
    ("快乐地朗读", {"emotions": ("happy",), "speed": 1.08, "pitch": 1.0}),  # 快乐 is happy, not 快
    ("语速不要太快也不要太慢", {"speed": 1.0}),
    ("用粤语唱出来", {"ns": ["dialect: Cantonese", "singing"]}),
    ("又快又慢", {"speed": SLOW, "ns": ["conflict"]}),
    ("悄悄地说", {"emotions": ("whisper",), "gain": -8.0, "ns": ["whisper"]}),
    ("用英语说", {"language": "en"}),
    ("稍微快一点，大声", {"speed": FAST ** 0.5, "gain": 6.0}),
    ("不要男声", {"applied": ["not male"]}),
    ("温柔地读", {"emotions": ("gentle",), "speed": 0.95, "gain": -2.0}),
    ("非常生气地说", {"emotions": ("angry",), "speed": 1.08 ** 1.5, "gain": 6.0}),
    ("开心一点，但是不要太大声", {"emotions": ("happy",), "speed": 1.08 ** 0.5, "pitch": 0.5,
                              "gain": -3.0}),
    ("用东北话，慢慢地说", {"speed": SLOW, "ns": ["Northeastern"]}),
    ("用韩语说", {"ns": ["language: Korean"]}),
    # --- mixed Chinese/English
    ("read it 慢一点 and happily", {"speed": SLOW ** 0.5, "emotions": ("happy",), "pitch": 1.0}),
    ("用calm的语气", {"emotions": ("calm",), "speed": 0.92, "gain": -1.0}),
    ("大声 but not too fast", {"gain": 6.0, "speed": SLOW ** 0.5}),
    ("very happy 而且 用男声", {"voice": "male_1", "emotions": ("happy",), "speed": 1.08 ** 1.5,
                             "pitch": 1.5}),
    ("用 a child's voice 唱歌", {"voice": "child", "ns": ["singing"]}),
    # --- found in review: each failed before its fix
    ("特别快", {"speed": FAST ** 1.5}),  # 特别 is "very", not 别 "don't"
    ("用特别温柔的声音", {"emotions": ("gentle",), "speed": 0.95 ** 1.5, "gain": -3.0}),
    ("太快了", {"speed": SLOW ** 0.5}),  # a complaint: slow down a little
    ("it's too loud", {"gain": -3.0}),
    ("声音太小了", {"gain": 3.0}),
    ("twice as fast", {"speed": 2.0}),
    ("read it at half speed", {"speed": 0.5}),
    ("两倍速", {"speed": 2.0}),
    ("very very slow", {"speed": SLOW ** 2}),
    ("非常非常慢", {"speed": SLOW ** 2}),
    ("声音再大一点", {"gain": 3.0}),
    ("声音大小适中", {"gain": 0.0, "ns": ["no instruction this engine understands"]}),  # 大小: not loud (+6 dB)
    ("把音量调低", {"gain": -6.0}),
    ("happy but slowly with a low voice", {"speed": SLOW, "pitch": -3.0,
                                           "ns": ["emotion 'happy' ('happy'): nothing applied"]}),
    ("带点广东口音", {"ns": ["dialect: 广东口音 (not supported by this engine)"]}),
    ("给小朋友讲故事", {"ns": ["nothing applied"]}),  # the listeners, not a child's voice
    ("read it for kids, slowly", {"speed": SLOW}),
    ("Speak cheerfully, like a children's storyteller.", {"emotions": ("happy",), "speed": 1.08,
                                                         "pitch": 1.0}),  # a UI example
    ("用小朋友的声音，给小朋友讲故事", {"voice": "child"}),
]


def test_table_has_at_least_forty_instructions():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("instruction,expect", CASES, ids=[c[0] for c in CASES])
def test_plan_table(instruction: str, expect: dict):
    p = plan(instruction, EMBEDDED, presets=PRESETS)
    assert p.native is False and p.native_instruction is None
    assert p.speed == pytest.approx(expect.get("speed", 1.0), abs=0.006)
    assert p.pitch_semitones == pytest.approx(expect.get("pitch", 0.0), abs=0.01)
    assert p.gain_db == pytest.approx(expect.get("gain", 0.0), abs=0.01)
    assert p.voice == expect.get("voice")
    assert p.emotions == expect.get("emotions", ())
    assert p.language == expect.get("language")
    ns = expect.get("ns", [])
    if not ns:
        assert p.not_supported == (), p.not_supported
    for fragment in ns:
        assert any(fragment in line for line in p.not_supported), (fragment, p.not_supported)
    for fragment in expect.get("applied", []):
        assert any(fragment in line for line in p.applied), (fragment, p.applied)
    # Everything the plan changes is reported in words.
    if p.speed != 1.0:
        assert any("speed" in line for line in p.applied)
    if p.pitch_semitones:
        assert any("pitch" in line for line in p.applied)
    if p.gain_db:
        assert any("volume" in line for line in p.applied)
    if p.voice:
        assert any(p.voice in line for line in p.applied)


def test_applied_lines_are_readable():
    p = plan("read it slowly", EMBEDDED)
    assert p.applied == ("speed ×0.80 ('slowly')",)
    p = plan("用四川话说", EMBEDDED)
    assert p.not_supported == ("dialect: Sichuanese (not supported by this engine)",)
    p = plan("用开心的语气说", EMBEDDED)
    assert p.applied == ("emotion 'happy' ('开心') approximated by speed ×1.08, pitch +1.0 st",)


def test_review_findings_report_text():
    assert plan("特别快", EMBEDDED).applied == ("speed ×1.40 ('特别快')",)
    assert plan("太快了", EMBEDDED).applied == ("speed ×0.89 ('太快')",)
    assert plan("too fast", EMBEDDED).applied == ("speed ×0.89 ('too fast')",)
    assert plan("not too fast", EMBEDDED).applied == ("speed ×0.89 ('not too fast')",)
    assert plan("twice as fast", EMBEDDED).applied == ("speed ×2.00 ('twice as fast')",)
    assert plan("very very slow", EMBEDDED).applied == ("speed ×0.64 ('very very slow')",)
    assert plan("把声音调大", EMBEDDED).applied == ("volume +6.0 dB ('调大')",)
    assert plan("声音稍微大一点", EMBEDDED).applied == ("volume +3.0 dB ('稍微大一点')",)
    assert plan("用很重的湖南口音", EMBEDDED).not_supported == (
        "dialect: 湖南口音 (not supported by this engine)",)


def test_emotion_with_nothing_audible_left_is_not_reported_as_applied():
    p = plan("whisper loudly", EMBEDDED)
    assert p.gain_db == 6.0 and p.emotions == ()
    assert p.applied == ("volume +6.0 dB ('loudly')",)
    assert p.not_supported == ("emotion 'whisper' ('whisper'): nothing applied (volume left to 'loudly')",
                               "whispered (breathy) voice quality (not supported by this engine)")
    assert p.to_dict()["controls"]["emotions"] == []


def test_summary_tells_not_understood_from_not_supported():
    for understood_but_unsupported in ("用四川话说", "sing it"):
        message = plan(understood_but_unsupported, EMBEDDED).message
        assert message.startswith("nothing applied: what it asks for is not supported"), message
    assert "understood none of it" in plan("asdfgh", EMBEDDED).message
    assert plan("read it slowly", EMBEDDED).message.startswith("applied as explicit controls")


def test_each_emotion_name_is_understood():
    for name in EMOTION_EFFECTS:
        assert plan(name, EMBEDDED).emotions == (name,)


def test_voice_without_preset_is_not_supported():
    p = plan("use a male voice", EMBEDDED, presets=())
    assert p.voice is None
    assert any("male voice" in line and "no such voice" in line for line in p.not_supported)


def test_unsupported_language_for_engine():
    caps = dataclasses.replace(EMBEDDED, languages=("auto", "zh"))
    p = plan("read it in English", caps)
    assert p.language is None
    assert any("English" in line for line in p.not_supported)


def test_speed_clamped_to_engine_range_and_said():
    p = plan("extremely slowly, very very slowly 0.3x", EMBEDDED)
    assert p.speed == 0.5
    assert any("limited" in line for line in p.applied)


def test_pitch_and_gain_limits():
    p = plan("extremely loud, extremely happy, extremely excited", EMBEDDED)
    assert -18.0 <= p.gain_db <= 9.0
    assert -6.0 <= p.pitch_semitones <= 6.0


def test_empty_instruction_is_neutral():
    for text in ("", "   "):
        p = plan(text, EMBEDDED)
        assert p.is_neutral and p.applied == () and p.not_supported == ()


def test_bad_instruction_types_and_lengths():
    with pytest.raises(ParameterError):
        plan(None, EMBEDDED)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="limit"):
        plan("慢" * (MAX_INSTRUCTION_CHARS + 1), EMBEDDED)


def test_random_text_never_raises():
    rng = random.Random(7)
    alphabet = "慢快大小声男女孩不要太很稍微开心伤心 ab,.!?xX1.5倍速-'\n<|>slowfastloud"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        p = plan(text, EMBEDDED, presets=PRESETS)
        assert 0.5 <= p.speed <= 2.0
        assert isinstance(p.to_dict()["applied"], list)


def test_to_dict_shape():
    d = plan("slowly, 用四川话说", EMBEDDED).to_dict()
    assert set(d) == {"applied", "not_supported", "controls", "message"}
    assert "not supported" in d["message"]
    assert d["controls"]["speed"] == pytest.approx(0.8)
    assert {"speed", "pitch_semitones", "gain_db", "voice", "emotions", "language",
            "native_instruction"} <= set(d["controls"])


# --- native instruct (CosyVoice)


@pytest.mark.parametrize("version,expected", [
    (2, "用四川话说这句话<|endofprompt|>"),
    (1, "用四川话说这句话<endofprompt>"),  # upstream frontend_instruct @46dfe04 appends '<endofprompt>'
    (3, "You are a helpful assistant. 用四川话说这句话<|endofprompt|>"),
])
def test_native_plan_uses_the_engines_format(version: int, expected: str):
    """The native instruction is the engine's format of it (CosyVoice's per version:
    tests/engines/cosyvoice/test_instruct_format.py); without a format it goes as written."""
    p = plan("用四川话说这句话", NATIVE, native_format=partial(format_instruction, version=version))
    assert p.native and p.native_instruction == expected
    assert plan(" 用四川话说这句话 ", NATIVE).native_instruction == "用四川话说这句话"


def test_native_plan_explains_but_claims_nothing_unsupported():
    p = plan("用四川话说，慢一点", NATIVE, presets=PRESETS)
    assert p.not_supported == ()
    assert p.applied[0].startswith("passed to the model")
    assert any("Sichuanese" in line and "explanation" in line for line in p.applied)
    assert p.voice is None


# --- applying a plan


def test_apply_plan_embedded_multiplies_and_clamps_speed():
    p = plan("very fast", EMBEDDED)  # ×1.40
    app = apply_plan(p, SynthesisOptions(speed=1.5), "female_1")
    assert app.options.speed == 2.0 and app.options.instruct is None
    assert any("limited to 2" in line for line in app.plan.applied)
    app = apply_plan(p, SynthesisOptions(speed=1.0), "female_1")
    assert app.options.speed == pytest.approx(1.3975, abs=1e-3)
    assert not any("limited" in line for line in app.plan.applied)


def test_apply_plan_voice_override_only_when_asked():
    prompt = VoicePrompt(engine="kokoro", model_id="m")
    app = apply_plan(plan("slowly", EMBEDDED, presets=PRESETS), SynthesisOptions(), prompt)
    assert app.voice is prompt
    app = apply_plan(plan("用男声", EMBEDDED, presets=PRESETS), SynthesisOptions(), prompt)
    assert app.voice == "male_1"
    assert any("instead of 'the voice of your recording'" in line for line in app.plan.applied)
    app = apply_plan(plan("用男声", EMBEDDED, presets=PRESETS), SynthesisOptions(), "male_2")
    assert app.voice == "male_2" and app.plan.voice == "male_2"  # already male: the choice stays
    assert any("your preset 'male_2' kept" in line for line in app.plan.applied)
    app = apply_plan(plan("用男声", EMBEDDED, presets=PRESETS), SynthesisOptions(), "female_2")
    assert app.voice == "male_1"
    assert any("instead of 'female_2'" in line for line in app.plan.applied)


def test_apply_plan_language():
    app = apply_plan(plan("用英语说", EMBEDDED), SynthesisOptions(language="auto"), "female_1")
    assert app.options.language == "en"


def test_apply_plan_native_passes_instruction_only():
    p = plan("slowly and loudly", NATIVE, native_format=COSYVOICE2_FORMAT)
    app = apply_plan(p, SynthesisOptions(speed=1.2), "v")
    assert app.options.instruct == "slowly and loudly<|endofprompt|>"
    assert app.options.speed == 1.2
    audio = np.full(2400, 0.1, dtype=np.float32)
    assert postprocess(audio, 24000, p) is audio


def test_postprocess_neutral_is_identity_and_gain_changes_level():
    audio = (0.2 * np.sin(np.arange(24000) / 10)).astype(np.float32)
    assert postprocess(audio, 24000, InstructPlan()) is audio
    louder = postprocess(audio, 24000, plan("loudly", EMBEDDED))
    assert np.sqrt(np.mean(louder ** 2)) > 1.8 * np.sqrt(np.mean(audio ** 2))
    assert np.max(np.abs(louder)) <= 0.97 + 1e-6


# --- engine glue and the CLI


class _FakeEngine:
    def __init__(self, name: str, model_id: str, native: bool, version: int = 2):
        self.name, self.model_id = name, model_id
        self.capabilities = dataclasses.replace(NATIVE if native else EMBEDDED)
        if native:  # as CosyVoiceEngine: the model's version (from its manifest) picks the format
            self.format_instruction = partial(format_instruction, version=version)

    def presets(self) -> list[str]:
        return list(PRESETS)


@pytest.mark.parametrize("name,version", [("cosyvoice2", 2), ("cosyvoice3", 3), ("cosyvoice1", 1)])
def test_plan_for_engine_uses_the_engines_instruction_format(name, version):
    """The format follows the engine's version, never a guess from the model id."""
    from cosyedge.instruct.plan import plan_for_engine

    engine = _FakeEngine(name, "my-model-v3" if version != 3 else "my-model", native=True, version=version)
    p = plan_for_engine("大声一点", engine)
    assert p.native_instruction.endswith("大声一点<endofprompt>" if version == 1 else "大声一点<|endofprompt|>")
    assert p.native_instruction.startswith("You are a helpful assistant.") == (version == 3)


def test_plan_for_embedded_engine_uses_its_presets():
    from cosyedge.instruct.plan import plan_for_engine

    p = plan_for_engine("a child's voice", _FakeEngine("kokoro", "kokoro-int8", native=False))
    assert p.voice == "child" and not p.native


def test_cli_speak_instruct_on_tiny_engine(tmp_path, monkeypatch, capsys):
    """`speak --instruct` applies the plan, prints both lists and still writes audio."""
    import soundfile as sf

    from cosyedge import cli
    from cosyedge.commands import speak
    from tests.engines.kokoro.test_engine import SplitOnPeriodFrontend
    from tests.helpers import tiny_kokoro

    engine = tiny_kokoro.engine(tmp_path, SplitOnPeriodFrontend())
    monkeypatch.setattr(speak, "load_engine", lambda settings: engine)
    text = "Hello there. General Kenobi."
    assert cli.main(["speak", text, "-o", str(tmp_path / "plain.wav")]) == 0
    capsys.readouterr()
    assert cli.main(["speak", text, "--instruct", "slowly, 用四川话说, louder",
                     "-o", str(tmp_path / "instr.wav")]) == 0
    out = capsys.readouterr().out
    assert "applied: speed ×0.80 ('slowly')" in out
    assert "not applied: dialect: Sichuanese (not supported by this engine)" in out
    plain, _ = sf.read(tmp_path / "plain.wav")
    instr, _ = sf.read(tmp_path / "instr.wav")
    assert len(instr) > 1.15 * len(plain)
    assert np.sqrt(np.mean(instr ** 2)) > 1.5 * np.sqrt(np.mean(plain ** 2))


# --- report lines: notes with codes, built from parts (never edited as text) ----------------------

def test_every_report_line_is_a_note_with_a_listed_code():
    from cosyedge.notes import NOTE_CODES, Note

    for instruction, _ in CASES:
        for caps in (EMBEDDED, NATIVE):
            p = plan(instruction, caps, presets=PRESETS)
            applied = apply_plan(p, SynthesisOptions(speed=2.0), "female_2").plan.applied
            lines = [*applied, *p.not_supported, p.message]
            for line in lines:
                assert isinstance(line, Note) and line.code in NOTE_CODES, (instruction, line)


def test_the_voice_line_is_rebuilt_from_its_parts():
    ask = plan("用男声", EMBEDDED, presets=PRESETS)
    (line,) = ask.applied
    assert line.code == "instruct_voice_preset"
    assert dict(line.params) == {"preset": "male_1", "voice": "male", "phrase": "男声"}
    (kept,) = apply_plan(ask, SynthesisOptions(), "male_2").plan.applied
    assert kept == "voice: your preset 'male_2' kept, for a male voice ('男声')"
    assert kept.code == "instruct_voice_kept" and kept.params["kept"] == "male_2"
    (instead,) = apply_plan(ask, SynthesisOptions(), "female_2").plan.applied
    assert instead == "voice: preset 'male_1' for a male voice ('男声'), instead of 'female_2'"
    assert instead.code == "instruct_voice_instead" and instead.params["instead_of"] == "female_2"


def test_negative_amounts_keep_their_minus_sign():
    p = plan("lower pitch, quieter", EMBEDDED)
    assert [str(line) for line in p.applied] == ["pitch −3.0 st ('lower pitch')", "volume −6.0 dB ('quieter')"]
    amounts = [(line.params["control"], line.params["amount"]) for line in p.applied]
    assert amounts == [("pitch", -3.0), ("volume", -6.0)]


def edited_text(source: str) -> list[int]:
    """Lines of ``source`` that edit or test finished text: ``str.replace`` (``dataclasses.replace``
    is fine) and any method called on a report ``line``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            dataclasses_replace = isinstance(receiver, ast.Name) and receiver.id == "dataclasses"
            if node.func.attr == "replace" and not dataclasses_replace:
                found.append(node.lineno)
            elif isinstance(receiver, ast.Name) and receiver.id == "line":
                found.append(node.lineno)
    return sorted(found)


def test_report_lines_are_built_not_edited():
    from pathlib import Path

    import cosyedge.instruct.plan

    assert edited_text(Path(cosyedge.instruct.plan.__file__).read_text("utf-8")) == []
    # what it replaced: a finished line edited, tested by its text, and a number's sign swapped
    old = ('applied = [line.replace(f"preset \'{v}\'", "your preset") for line in applied]\n'
           'applied = [line + "!" if line.startswith("voice: preset") else line for line in applied]\n'
           'text = f"pitch {st:+.1f} st".replace("-", "−")\n')
    assert edited_text(old) == [1, 2, 3]
