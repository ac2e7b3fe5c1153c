#!/usr/bin/env bash
# Set up the dev environment (if needed) and run the whole test suite:
#   1. everything but tests/cosyvoice in .venv (the app's environment: no torch),
#   2. tests/cosyvoice (parity against upstream PyTorch) in .venv-ref.
# With arguments, only the first run happens, with the arguments passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
mkdir -p test-artifacts
run_pytest() {  # VENV ARGS...; pytest's exit 5 (no tests collected) counts as a failure
  local venv=$1; shift
  set +e
  "$venv/bin/python" -m pytest "$@"
  local rc=$?
  set -e
  if [ "$rc" = 5 ]; then
    echo "error: pytest collected no tests (exit 5); that is a failure here" >&2
    return 1
  fi
  return "$rc"
}

if [ $# -gt 0 ]; then
  run_pytest .venv "$@"
  exit $?
fi
rc=0
run_pytest .venv --ignore=tests/cosyvoice || rc=$?
run_pytest .venv-ref tests/cosyvoice || rc=$?
exit "$rc"
