#!/usr/bin/env bash
# gemm-epilogue-ab.sh: the split-K epilogue's batched loads (932e1e7, gemm_fp4_sm90 NOTES.md "The
# split-K reduction's loads batched") against the build before it, in one device call (<= 590 s;
# issue 25, and 24 for int4), into $OUT (reports.tar and the table in the log):
#   1. build nibble, gemm_fp4_sm90, int4_gemm_sm90, the cuBLAS bf16 points and the GPU tests; the base
#      libraries are carried (built on the CPU machine at the base commit, in .ab/ as
#      libnibble_gemm_fp4_sm90-<base>.so and libnibble_int4_gemm_sm90-<base>.so);
#   2. test_gemm_solutions_gpu and test_int4_gemm_gpu (every split plan against the fp64 oracle);
#   3. the M = 128 shapes whose default splits K (and one that does not, n8192: a control), new and
#      base in turn, twice (the machine drifts), and cuBLAS bf16 once each.
#   bash reports/h200/next/gemm-epilogue-ab.sh <commit> <base commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
base=${2:?base commit (its libraries in .ab/)}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 nibble_int4_gemm_sm90 \
  nibble_gemm_cublas_bf16 nibble_int4_gemm_cublas_bf16 test_gemm_solutions_gpu test_int4_gemm_gpu
B=build-hopper
for l in gemm_fp4_sm90 int4_gemm_sm90; do
  cp ".ab/libnibble_$l-$base.so" "$B/lib/libnibble_${l}_base.so" || { echo "no .ab/libnibble_$l-$base.so: build it at $base"; exit 2; }
done
export NIBBLE_BINARY_DIR=$PWD/$B NIBBLE_SOURCE_DIR=$PWD
timeout 150 $B/tests/test_int4_gemm_gpu > "$OUT/int4-gputest.log" 2>&1
echo "int4_gemm_gpu exit $?"; grep -E "FAILED|PASSED|Failure" "$OUT/int4-gputest.log" | head -10
nv=gemm-w4a16-nvfp4 mx=gemm-bf16-mxfp4 i4=gemm-w4a16-int4
fp="$nv:m128-n3072-k3072 $nv:m128-n4096-k4096 $nv:m128-n3072-k8192 $nv:m128-n8192-k3072 $mx:m128-n4096-k4096 $mx:m128-n3000-k3080"
in="$i4:m128-n1024-k3072 $i4:m128-n4096-k4096 $i4:m128-n4096-k14336"
runs=""
for round in 1 2; do
  for c in $fp; do runs="$runs $c:fp4_sm90:NIBBLE_R=$round $c:fp4_sm90_base:NIBBLE_R=$round"; done
  for c in $in; do runs="$runs $c:int4_gemm_sm90:NIBBLE_R=$round $c:int4_gemm_sm90_base:NIBBLE_R=$round"; done
done
for c in $fp; do runs="$runs $c:cublas_bf16"; done
for c in $in; do runs="$runs $c:int4_gemm_cublas_bf16"; done
timeout $(( 580 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh $B "$NIBBLE_SOURCE_COMMIT" "$runs" > "$OUT/ab.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "gpu test exit|FAILED|Failure" "$OUT/ab.log" | head -10
grep -vE "^grade " "$OUT/ab.log" | grep -E "^gemm-" | sort | awk '{printf "%-17s %-18s %-36s %-8s %9s\n", $1, $2, $3, $4, $5}'
