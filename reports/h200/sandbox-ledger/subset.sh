#!/usr/bin/env bash
# One call when device time is short: build everything, then the GPU tests this change touches
# (the hostile suite and whole grades) with the sandbox as the probe finds it; logs into $OUT.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
start=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 -- -k > "$OUT/build-full.log" 2>&1
grep -E "error" "$OUT/build-full.log" | head -20
echo "build done in $(( $(date +%s) - start )) s"
cd build-hopper
# DEADLINE_S: the tests stop that many seconds after the script's start, whatever the build took
# (a call with little device time left); else ${2:-300} seconds after the build.
limit=${2:-300}
[ -n "${DEADLINE_S:-}" ] && limit=$(( DEADLINE_S - ($(date +%s) - start) ))
timeout $limit ctest -j4 -R "${3:-hostile_gpu|grade_gpu|sandbox}" --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest rc=$? at $(( $(date +%s) - start )) s" >> "$OUT/ctest.log"
cp Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
grep -E "tests passed|Failed|\*\*\*|ctest rc" "$OUT/ctest.log" | tail -10
grep -E "hostile behaviours tried|MISSED|sandbox:|landlock|skipped" "$OUT/LastTest.log" | sort -u | head -20
