#!/usr/bin/env bash
# The ledger's reveal and digest on a GPU when a whole test-command run does not fit the device time
# left: the build, then the GPU tests that grade (gpu_checks_gpu, grade_gpu, python_solutions_gpu,
# hostile_gpu) side by side, logs into $OUT.
#   bash reports/h200/next/ledger-check.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 > "$OUT/build.log" 2>&1 || { echo "build failed"; grep -m5 error "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
(cd build-hopper && timeout 420 ctest -j4 -R "gpu_checks_gpu|grade_gpu|python_solutions_gpu|hostile_gpu" --output-on-failure > "$OUT/ctest-gpu.log" 2>&1)
echo "ctest rc=$? in $(( $(date +%s) - t0 )) s"
nvidia-smi -L >> "$OUT/ctest-gpu.log"
grep -E "Test +#|tests passed|ledger: overhead|credited of" "$OUT/ctest-gpu.log" | sort | uniq -c | sort -rn | head -30
grep -E "hostile behaviours tried|MISSED" "$OUT/ctest-gpu.log" | sort -u | head -20
