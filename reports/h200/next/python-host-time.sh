#!/usr/bin/env bash
# python-host-time.sh: one device call (~3-4 min), into $OUT: where a Python GEMM call's ~140 us
# beyond its own ~24 us goes inside the grader (reports/h100/gemm-ab-386eb2a/README.md), and the
# smaller excess of cuBLAS's calls:
#   1. bench_python_shim: the FP4 Python baseline, cuBLAS bf16 and fp4_sm90 per call (run + device
#      sync), bare and inside the child's TimedCalls (CUPTI records, launch callbacks, L2 flush), in
#      one process without sandbox, ledger or watchdog;
#   2. the tiny Python grade as the test grades it, then with the sandbox's layers left out
#      (NIBBLE_SANDBOX_DISABLE), then with --profile nsys (its own child, nsys's CUPTI instead of
#      ours) and nsys's API and OS-runtime summaries of that run.
# Reading it: bare ~ timed in (1) and the grade slow: the child (sandbox, ledger, watchdog) is where;
# (2)'s sandbox-off grade says whether the sandbox is. timed >> bare: our CUPTI use is.
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/python-host-time.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_python_gemm nibble_gemm_cublas_bf16 nibble_gemm_fp4_sm90 bench_python_shim
timeout 120 build-hopper/bin/bench_python_shim --benchmark_out="$OUT/bench-python-shim.json" \
  --benchmark_out_format=json > "$OUT/bench-python-shim.txt" 2>&1
echo "bench_python_shim rc=$?"; grep -E "BM_|left out|no GPU" "$OUT/bench-python-shim.txt"
grade() {  # name, then any env assignments for the grade
  local name=$1; shift
  env "$@" timeout 120 build-hopper/bin/nibble grade --task gemm-bf16-mxfp4 --config tiny \
    --solution solutions/gemm_fp4/python/dequant_matmul.py --out "$OUT/$name.json" ${PROFILE:-} > "$OUT/$name.log" 2>&1
  echo "$name rc=$?"; grep -E "disposition|time/call|sandbox|profile" "$OUT/$name.log" | cut -c1-220
}
grade python-tiny
grade python-tiny-no-sandbox NIBBLE_SANDBOX_DISABLE=namespaces,landlock,seccomp
PROFILE="--profile nsys" grade python-tiny-nsys
rep=$(ls "$OUT"/python-tiny-nsys*.nsys-rep 2>/dev/null | head -1)
if [ -n "$rep" ] && command -v nsys > /dev/null; then
  nsys stats --report cuda_api_sum,osrt_sum,nvtx_sum --format csv --force-export true "$rep" > "$OUT/nsys-stats.csv" 2>&1
  head -60 "$OUT/nsys-stats.csv"
  rm -f "$rep" "${rep%.nsys-rep}.sqlite"  # large; the summaries stay
fi
echo "python-host-time.sh done in $(( $(date +%s) - t0 )) s"
