#!/usr/bin/env bash
# Set up the dev environment (if needed) and run the test suite.
#   scripts/test.sh              the whole suite, as CI runs it:
#                                  0. the tiny converted CosyVoice models that .venv tests use, built in
#                                     .venv-ref into test-artifacts/tiny-models and tiny-models-v3
#                                     (reused while their stamps match),
#                                  1. every test not marked `reference` in .venv (the app's environment: no torch),
#                                  2. the tests marked `reference` (parity against upstream PyTorch) in .venv-ref.
#   scripts/test.sh --fast       the quick loop (under 3 minutes): .venv only, without the tests marked
#                                slow, browser, load or reference (nothing there needs step 0); more
#                                arguments go to pytest.
#   scripts/test.sh ARGS...      steps 0 and 1, with ARGS passed to pytest (e.g. a test file or folder;
#                                tests marked reference are left out unless ARGS give their own -m).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
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

if [ "$fast" = 1 ]; then
  run_pytest .venv -m "not slow and not browser and not load and not reference" "$@"
  exit $?
fi
# Built here, before pytest, so that .venv tests find it (tests/helpers/tiny_models.py).
.venv-ref/bin/python -m tests.helpers.cosyvoice_tiny --out test-artifacts/tiny-models
# The committed CosyVoice3 upstream fixture, converted (tests/helpers/cosyvoice3_fixture.py).
.venv-ref/bin/python -m tests.helpers.cosyvoice3_fixture --out test-artifacts/tiny-models-v3
if [ $# -gt 0 ]; then
  # `reference` modules need .venv-ref; a -m among ARGS replaces this one (pytest keeps the last)
  run_pytest .venv -m "not reference" "$@"
  exit $?
fi
rc=0
run_pytest .venv -m "not reference" || rc=$?
run_pytest .venv-ref -m reference || rc=$?
exit "$rc"
