#!/usr/bin/env bash
# Set up the dev environment (if needed) and run the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
mkdir -p test-artifacts
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "error: pytest collected no tests (exit 5); that is a failure here" >&2
  exit 1
fi
exit "$rc"
