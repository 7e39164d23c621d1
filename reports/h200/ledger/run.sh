#!/usr/bin/env bash
# Issue 20 on the H200: build, then the hostile suite, whole grades and the CPU tests of the ledger
# and verdicts; logs and reports into $OUT.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
source scripts/env.sh
start=$(date +%s)
{ cmake --preset hopper >/dev/null && cmake --build build-hopper -j16 -- -k 2>&1 | grep -E "error|warning: unused|Error" | head -40; } > "$OUT/build.log" 2>&1
echo "build done in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
cd build-hopper
timeout ${2:-400} ctest -R "${3:-hostile_gpu|grade_gpu|ledger|verdict|protocol}" -j4 --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest rc=$? in $(( $(date +%s) - start )) s" >> "$OUT/ctest.log"
cp Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
nvidia-smi -L >> "$OUT/ctest.log" 2>&1
grep -E "Passed|Failed|tests passed|ctest rc|Timeout" "$OUT/ctest.log" | tail -20
grep -E "^\s+(control|hide|gap|cheap|fixed|kv_above|token_write|stop)|caught|hostile suite" -A0 "$OUT/LastTest.log" | head -60
