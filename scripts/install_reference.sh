#!/usr/bin/env bash
# Install the test/dev-only PyTorch reference for CosyVoice parity tests and the converter into VENV.
#
#   scripts/install_reference.sh VENV
#
# Idempotent: a second run only checks what is already there. Never needed at run time: the
# cosyedge runtime is onnxruntime + numpy. The reference is the PyPI package cosyvoice-minicpmo
# (Apache-2.0; its model code equals upstream CosyVoice commit 46dfe04), installed with --no-deps
# so torchaudio / onnxruntime-gpu / whisper / modelscope stay out. See tests/helpers/cosyvoice_reference.py
# for the import shim it needs.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 VENV" >&2
    exit 2
fi
VENV=$1
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

if ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
    "${PIP[@]}" "torch==2.13.0"
fi
# transformers is pinned: from 4.53 on the upstream LLM's cached decoding is silently wrong.
"${PIP[@]}" "transformers==4.51.3" "diffusers==0.29.0" "conformer==0.3.2" einops omegaconf scipy onnx pyyaml
"${PIP[@]}" --no-deps "cosyvoice-minicpmo==0.1.0"
# Whisper log-mel and tokenizer reference (tests import whisper/audio.py and whisper/tokenizer.py; numba is not needed).
"${PIP[@]}" --no-deps "openai-whisper==20250625"
# CosyVoice-300M: whisper's tokenizer (its multilingual.tiktoken is what convert cosyvoice1 copies) needs tiktoken.
"${PIP[@]}" "tiktoken==0.14.0"
# bench/closest_voice.py: Resemblyzer, an independent speaker encoder (its GE2E weights ship in the
# wheel; Apache-2.0). --no-deps: webrtcvad needs a compiler and only serves a VAD trim the bench skips.
"${PIP[@]}" --no-deps "resemblyzer==0.1.4"
"$VENV/bin/python" -c 'import torch, onnx, cosyvoice, matcha; print("reference ok: torch", torch.__version__)'
