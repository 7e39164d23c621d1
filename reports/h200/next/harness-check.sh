#!/usr/bin/env bash
# harness-check.sh: the harness's changes since 86c7d66 on a GPU in one short call (<= ~400 s),
# when the device time left is too short for the whole test command (final.sh, ~550 s):
#   1. build nibble, the reference, the hostile solutions and the megakernel;
#   2. nibble.test.hostile_gpu (every hostile row a whole timed grade: the child's calibration before
#      the solution is loaded, the dry gap, seccomp's kept descriptors, the two new rows);
#   3. the main job's grade: the megakernel, full, seed 0 (the fixture built here).
#   bash reports/h200/next/harness-check.sh <commit> [seconds]
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
budget=${2:-400}
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
# below 350 s in all the main job's grade is left out: the hostile suite gets the rest
reserve=100; targets="test_hostile_gpu nibble_megakernel"
[ "$budget" -lt 350 ] && reserve=10 && targets=test_hostile_gpu
source reports/h200/next/build.sh $targets
# the test binary itself (as CTest runs it), so a call cut short still brings back every row it ran
NIBBLE_SOURCE_DIR=$PWD NIBBLE_BINARY_DIR=$PWD/build-hopper timeout $(( $(left) - reserve )) build-hopper/tests/test_hostile_gpu \
  > "$OUT/hostile_gpu.log" 2>&1
echo "hostile_gpu: exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "hostile behaviours tried|MISSED|Failure|Passed|Failed|\[  FAILED" "$OUT/hostile_gpu.log" | head -20
B=build-hopper
[ "$reserve" -gt 10 ] && [ "$(left)" -gt 30 ] && timeout $(( $(left) - 10 )) $B/bin/nibble grade --config full --seeds 0 \
  --solution $B/lib/libnibble_megakernel.so --out "$OUT/megakernel-full-seed0.json" > "$OUT/megakernel-full-seed0.log" 2>&1
echo "megakernel full seed 0: exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "disposition|time/token|hidden|ledger" "$OUT/megakernel-full-seed0.log" | head -8
nvidia-smi -L
