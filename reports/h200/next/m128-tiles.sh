#!/usr/bin/env bash
# m128-tiles.sh: issue 25's (and 24's) M = 128 plan in one device call (<= 590 s), into $OUT. The
# eleventh session's sweep (H100, ../../h100/session11-9e2d216/fp4-m128/) had 128-row tiles faster
# than today's 64-row ones on all three nvfp4 shapes it ran (14.40 / 26.40 / 21.34 against 17.21 /
# 35.46 / 25.30 us), at the planner's split on N = 3072 but at split 1 on N = 8192; an older H200
# build had the opposite at m128-n4096-k4096. Before sol::wgmma_bn_for changes, every M = 128 config
# of the three wgmma tasks graded four ways: the default plan, 128-row tiles at the planner's split,
# 128-row tiles at split 1, and cuBLAS bf16 (reports.tar, the table at the end of m128-tiles.log).
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/m128-tiles.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16
runs=""
for cfg in $(build-hopper/bin/nibble configs | awk '$2 ~ /^m128-/ && $1 != "megakernel-int4-weight-decode" {print $1 ":" $2}'); do
  task=${cfg%%:*}
  if [ "$task" = gemm-w4a16-int4 ]; then
    sol=int4_gemm_sm90 cublas=int4_gemm_cublas_bf16 wide=NIBBLE_INT4SM90_BN=128 one=NIBBLE_INT4SM90_SPLIT=1
  else
    sol=fp4_sm90 cublas=cublas_bf16 wide=NIBBLE_FP4SM90_KIND=wg128 one=NIBBLE_FP4SM90_SPLIT=1
  fi
  runs="$runs $cfg:$sol $cfg:$sol:$wide $cfg:$sol:$wide,$one $cfg:$cublas"
done
timeout $(( 560 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh build-hopper "$NIBBLE_SOURCE_COMMIT" \
  "$runs" none > "$OUT/m128-tiles.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
grep -vE "^grade " "$OUT/m128-tiles.log" | tail -80
echo "m128-tiles.sh done in $(( $(date +%s) - t0 )) s"
