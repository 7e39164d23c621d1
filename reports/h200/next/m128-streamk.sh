#!/usr/bin/env bash
# m128-streamk.sh: issue 25's M = 128 gap by the stream-K schedule, one device call (<= 590 s), into
# $OUT. The wgmma kernel's split-K clusters leave SMs idle at M = 128 (Nsight Compute at nvfp4
# m128-n3072-k3072: 69% SM-active, 192 blocks, two on 60 SMs and one on 72; NOTES.md "M = 128: what
# the measured plans rule out"); WgmmaPlan::stream_k (NIBBLE_FP4SM90_STREAMK=1 /
# NIBBLE_INT4SM90_STREAMK=1, on the planner's grid of 264 blocks or NIBBLE_..._GRID's) gives every
# block the same share of all tiles' K chunks, a shared tile summed by the last block to finish its
# part through a global scratch. Emulated on the CPU, never run on a GPU before this script.
# Predictions (NOTES.md "Stream-K"): the 3k shapes ~20% faster than the default (SM-active to ~90%,
# less the fixup's scratch round trip), n8192-k3072 faster too (two blocks on every SM instead of one
# on 128 of them), int4 n1024-k3072 slower at 264 blocks (16 pieces a tile: the fixup reads 0.5 MB
# a tile) and better at 132; GRID=132 slower than 264 elsewhere (one decode chain per SM).
#   1. correctness first: the GPU tests' stream-K cases (the fp64 oracle; the int4 reference);
#   2. gemm_fp4_sm90 (both FP4 tasks) and int4_gemm_sm90 at M = 128 on the official shapes (and int4
#      at m4096-n1024-k3072, its worst M = 4096 shape: 0.63x cuBLAS), each the default, stream-K on
#      264 and on 132 blocks, beside cuBLAS bf16 (reports.tar, the table last in streamk.log).
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/m128-streamk.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 \
  nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16 test_gemm_solutions_gpu test_int4_gemm_gpu
B=build-hopper
timeout 120 $B/tests/test_gemm_solutions_gpu --gtest_filter='*Forced*streamk*' > "$OUT/gputest-fp4.log" 2>&1
echo "fp4 stream-K tests: exit $?"; grep -E "^\[ +(OK|FAILED|SKIPPED) " "$OUT/gputest-fp4.log" | head -12
timeout 120 $B/tests/test_int4_gemm_gpu --gtest_filter='*Int4GemmSm90*streamk*' > "$OUT/gputest-int4.log" 2>&1
echo "int4 stream-K tests: exit $?"; grep -E "^\[ +(OK|FAILED|SKIPPED) " "$OUT/gputest-int4.log" | head -12
runs=""
for nk in n3072-k3072 n3000-k3080 n4096-k4096 n8192-k3072 n3072-k8192; do
  for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
    [ $task = gemm-bf16-mxfp4 ] && [ $nk != n3072-k3072 ] && [ $nk != n3000-k3080 ] && continue
    runs="$runs $task:m128-$nk:fp4_sm90 $task:m128-$nk:cublas_bf16 $task:m128-$nk:fp4_sm90:NIBBLE_FP4SM90_STREAMK=1"
    runs="$runs $task:m128-$nk:fp4_sm90:NIBBLE_FP4SM90_STREAMK=1,NIBBLE_FP4SM90_GRID=132"
  done
done
for c in m128-n3072-k3072 m128-n1024-k3072 m128-n4096-k4096 m128-n8192-k3072 m4096-n1024-k3072; do
  runs="$runs gemm-w4a16-int4:$c:int4_gemm_sm90 gemm-w4a16-int4:$c:int4_gemm_cublas_bf16"
  runs="$runs gemm-w4a16-int4:$c:int4_gemm_sm90:NIBBLE_INT4SM90_STREAMK=1"
  runs="$runs gemm-w4a16-int4:$c:int4_gemm_sm90:NIBBLE_INT4SM90_STREAMK=1,NIBBLE_INT4SM90_GRID=132"
done
timeout $(( 570 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh $B "$NIBBLE_SOURCE_COMMIT" "$runs" none \
  > "$OUT/streamk.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
tail -60 "$OUT/streamk.log"
