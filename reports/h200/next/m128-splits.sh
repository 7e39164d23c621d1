#!/usr/bin/env bash
# m128-splits.sh: issue 25's M = 128 gap by K split, one device call (<= 590 s), into $OUT. The planner
# splits K by powers of two (plan_wgmma: 1, 2, 4, 8) within wgmma_split_wave; the kernels now also
# take 3, 5 and 6 (solutions/common/wgmma_dequant_gemm.cuh, kWgmmaOddSplits, bulk-copied weights),
# never run on a GPU. At M = 128 (64 x 128 tiles) the official shapes have 48 tiles (N 3000, 3072:
# 0.85-0.95x cuBLAS on an H100, 2026-12-07), 64 (N 4096) and 128 (N 8192); blocks = tiles x split,
# at most two per SM. Predictions (NOTES.md "Odd K splits"): at N 4096 split 3 (192 blocks) beats
# the default 2 (128), as split 4 (192) beat 2 (96) at N 3072; at N 3072 split 5 (240) against 4
# (192) is the open question (256 blocks lost to 128 at N 4096).
#   0. probe_wgmma_occupancy: the blocks resident at once per tile and split, odd splits included;
#   1. correctness first: the GPU tests' odd-split cases (the fp64 oracle; the int4 reference);
#   2. gemm_fp4_sm90 (both FP4 tasks) and int4_gemm_sm90 at m128 on the 3k shapes and n4096-k4096 at
#      splits 2 to 6 (and 8 at N 3072), beside the default and cuBLAS bf16 (reports.tar, the table
#      last in splits.log).
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/m128-splits.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 \
  nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16 test_gemm_solutions_gpu test_int4_gemm_gpu \
  probe_wgmma_occupancy
B=build-hopper
# How many blocks of each split fit at once (clusters: cudaOccupancyMaxActiveClusters): 248 at split
# 4 of 64 x 128 on an H100 (2026-12-06), where the planner assumes 198.
timeout 30 $B/bin/probe_wgmma_occupancy > "$OUT/occupancy.txt" 2>&1; echo "occupancy probe: exit $?"; cat "$OUT/occupancy.txt"
# The GPU tests' odd-split cases (GemmFp4Sm90Forced *split3*, *split5*, *split6*; Int4GemmSm90 all).
timeout 150 $B/tests/test_gemm_solutions_gpu --gtest_filter='*Forced*split3*:*Forced*split5*:*Forced*split6*' \
  > "$OUT/gputest-fp4.log" 2>&1
echo "fp4 forced-split tests: exit $?"; grep -E "^\[ +(OK|FAILED|SKIPPED) " "$OUT/gputest-fp4.log" | head -12
timeout 150 $B/tests/test_int4_gemm_gpu --gtest_filter='*Int4GemmSm90*' > "$OUT/gputest-int4.log" 2>&1
echo "int4 sm90 tests: exit $?"; grep -E "^\[ +(FAILED|SKIPPED) |tests? ran|PASSED" "$OUT/gputest-int4.log" | head -12
runs=""
for nk in n3072-k3072 n3000-k3080 n4096-k4096; do
  for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
    runs="$runs $task:m128-$nk:fp4_sm90 $task:m128-$nk:cublas_bf16"
    for s in 2 3 4 5 6 $([ $nk = n3072-k3072 ] && echo 8); do runs="$runs $task:m128-$nk:fp4_sm90:NIBBLE_FP4SM90_SPLIT=$s"; done
  done
done
for nk in n3072-k3072 n4096-k4096; do
  runs="$runs gemm-w4a16-int4:m128-$nk:int4_gemm_sm90 gemm-w4a16-int4:m128-$nk:int4_gemm_cublas_bf16"
  for s in 2 3 4 5 6; do runs="$runs gemm-w4a16-int4:m128-$nk:int4_gemm_sm90:NIBBLE_INT4SM90_SPLIT=$s"; done
done
timeout $(( 570 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh $B "$NIBBLE_SOURCE_COMMIT" "$runs" none \
  > "$OUT/splits.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
tail -60 "$OUT/splits.log"
