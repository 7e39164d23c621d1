#!/usr/bin/env bash
# When the device time left fits no whole test command: ledger-quick.sh first (the ledger's figures
# in ~3 min), then the rest built and the GPU tests that grade (grade_gpu, hostile_gpu,
# python_solutions_gpu, gpu_checks_gpu) in what is left of <seconds> (the call's limit), logs into $OUT.
#   bash reports/h200/next/quick-then-gpu.sh <commit> <seconds>
set -uo pipefail
t0=$(date +%s)
budget=${2:?seconds}
bash reports/h200/next/ledger-quick.sh "${1:?commit}"
source scripts/env.sh
cmake --build build-hopper -j16 > "$OUT/build-all.log" 2>&1 || { echo "build failed"; grep -m5 error "$OUT/build-all.log"; exit 1; }
left=$(( budget - 15 - ($(date +%s) - t0) ))
echo "built all in $(( $(date +%s) - t0 )) s; ctest gets $left s"
(cd build-hopper && timeout $left ctest -j4 -R "gpu_checks_gpu|grade_gpu|python_solutions_gpu|hostile_gpu" --output-on-failure > "$OUT/ctest-gpu.log" 2>&1)
echo "ctest rc=$? in $(( $(date +%s) - t0 )) s"
nvidia-smi -L >> "$OUT/ctest-gpu.log"
grep -E "Test +#|tests passed|ledger: overhead|credited of" "$OUT/ctest-gpu.log" | sort | uniq -c | sort -rn | head -30
grep -E "hostile behaviours tried|MISSED" "$OUT/ctest-gpu.log" | sort -u | head -20
