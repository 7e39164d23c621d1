#!/usr/bin/env bash
# test.sh: install what is missing, build, run every test. GPU tests skip (with the reason) on a
# machine without a GPU; CTest then lists them as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
preset=${NIBBLE_PRESET:-release}
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$NIBBLE_JOBS"
ctest --preset "$preset" -j "$NIBBLE_JOBS" "$@"
