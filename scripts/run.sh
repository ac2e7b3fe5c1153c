#!/usr/bin/env bash
# Set up (if needed) and start cosyedge on the embedded engine at http://127.0.0.1:7860
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
