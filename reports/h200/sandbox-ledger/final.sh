#!/usr/bin/env bash
# One call: which Landlock rule the driver needs (diag-landlock.sh), then the README's test command
# whole (scripts/test.sh, hopper preset, libseccomp from NIBBLE_CMAKE_ARGS), logs into $OUT.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
start=$(date +%s)
timeout 60 bash reports/h200/sandbox-ledger/diag-landlock.sh > "$OUT/diag-landlock.log" 2>&1
cat "$OUT/diag-landlock.log" | head -40
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
export NIBBLE_PRESET=hopper NIBBLE_JOBS=16
timeout ${2:-420} bash scripts/test.sh > "$OUT/test-sh-h200.log" 2>&1
echo "scripts/test.sh rc=$? in $(( $(date +%s) - start )) s (diag included)" >> "$OUT/test-sh-h200.log"
cp build-hopper/Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
nvidia-smi -L >> "$OUT/test-sh-h200.log" 2>&1
grep -E "tests passed|Failed|\*\*\*|rc=" "$OUT/test-sh-h200.log" | tail -15
grep -E "hostile behaviours tried|MISSED|sandbox layer" "$OUT/LastTest.log" | sort -u | head -20
