"""The whole app (``python app.py``) in its own process on a tiny CosyVoice model, for REST tests.

One helper for the v1, v2 and v3 REST modules: they differ in the model they select, not in how
the server is started, waited for and stopped.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import soundfile as sf

from tests.helpers import REPO
from tests.helpers.live_server import free_port, stop_process

START_TIMEOUT_S = 180


@contextmanager
def app_process(models_dir: Path, model_id: str, folder: Path) -> Iterator[str]:
    """``python app.py`` with ``model_id`` from ``models_dir`` (one ONNX thread; outputs and prompts
    under ``folder``); yields its URL once ``/health`` answers, stops it after."""
    port = free_port()
    env = {**os.environ, "COSYEDGE_MODELS_DIR": str(models_dir), "COSYEDGE_MODEL": model_id,
           "COSYEDGE_OUTPUTS_DIR": str(folder / "outputs"), "COSYEDGE_PROMPTS_DIR": str(folder / "prompts"),
           "COSYEDGE_LOG_LEVEL": "WARNING", "COSYEDGE_ONNX_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not come up"
            time.sleep(0.3)
        yield url
    finally:
        stop_process(proc)


def prompt_wav(seconds: float = 3.0, sr: int = 16000) -> bytes:
    """A WAV prompt: a 160 Hz tone with a 3 Hz swell (random-weight models read it as a voice)."""
    t = np.arange(int(sr * seconds)) / sr
    tone = 0.3 * np.sin(2 * np.pi * 160 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    buf = io.BytesIO()
    sf.write(buf, tone.astype(np.float32), sr, format="WAV")
    return buf.getvalue()


def prompt_b64(seconds: float = 3.0) -> str:
    """:func:`prompt_wav` as the base64 text a JSON body carries."""
    return base64.b64encode(prompt_wav(seconds)).decode()
