#!/usr/bin/env bash
# The README's test command, whole, on the GPU machine; its CTest log into $OUT.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
export NIBBLE_PRESET=hopper NIBBLE_JOBS=16
start=$(date +%s)
timeout 570 bash scripts/test.sh > "$OUT/test-sh-h200.log" 2>&1
rc=$?
echo "scripts/test.sh rc=$rc in $(( $(date +%s) - start )) s" >> "$OUT/test-sh-h200.log"
cp build-hopper/Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
nvidia-smi -L >> "$OUT/test-sh-h200.log" 2>&1
tail -45 "$OUT/test-sh-h200.log"
