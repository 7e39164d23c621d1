#!/usr/bin/env bash
# test.sh: install what is missing, build, run every test. GPU tests skip (with the reason) on a
# machine without a GPU; CTest lists a test binary as skipped when every case in it skipped, as
# passed when its CPU cases passed and the rest skipped (tests/gtest_main.cpp), never a failure
# as either.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
preset=${NIBBLE_PRESET:-release}
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$NIBBLE_JOBS"
rc=0
ctest --preset "$preset" -j "$NIBBLE_JOBS" "$@" || rc=$?
# CTest lists skipped tests without their reason; the reasons are in its log: show each once.
case "$preset" in release) bdir=build ;; *) bdir=build-$preset ;; esac  # CMakePresets.json's binaryDir
log=$bdir/Testing/Temporary/LastTest.log
# GoogleTest writes "<file>:<line>: Skipped", then the reason; a script test exits 77 after "SKIP: <reason>".
if [ -f "$log" ] && grep -q -e ": Skipped$" -e "^SKIP: " "$log"; then
  echo "Why tests were skipped (count, reason):"
  awk 'skip { print; skip = 0 } /: Skipped$/ { skip = 1 } /^SKIP: / { print substr($0, 7) }' "$log" | sort | uniq -c | sed 's/^/  /'
fi
exit $rc
