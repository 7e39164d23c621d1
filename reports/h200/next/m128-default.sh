#!/usr/bin/env bash
# m128-default.sh: the M = 128 default (64 x 128 tiles up to M = 128, split blocks up to 3/2 per SM
# at that width: sol::wgmma_bn_for, sol::wgmma_split_wave) graded on every M = 128 config of nvfp4,
# mxfp4 and int4, after probe_wgmma_occupancy's table (blocks and clusters resident at once); first
# the shapes whose split the rule decides beside the neighbouring split (nvfp4 n3072-k3072 at split
# 2, n4096-k4096 at split 4 and at the 64 x 64 tiles of before; int4 n4096-k14336 at 64 x 64) and
# cuBLAS bf16 there, for the same machine's ratio; then 128 x 128 tiles of two consumer warpgroups
# (wg128x2, NIBBLE_INT4SM90_ROWS=128) on five shapes. One device call (~5 min; NIBBLE_CALL_S, default 290 s), into $OUT.
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/m128-default.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16 probe_wgmma_occupancy
# Blocks and clusters resident at once per tile and split (does 256 split blocks at 64 x 128 fit?).
build-hopper/bin/probe_wgmma_occupancy | tee "$OUT/occupancy.txt"
nv=gemm-w4a16-nvfp4 i4=gemm-w4a16-int4
runs="$nv:m128-n3072-k3072:fp4_sm90 $nv:m128-n3072-k3072:fp4_sm90:NIBBLE_FP4SM90_SPLIT=2 $nv:m128-n3072-k3072:cublas_bf16"
runs="$runs $nv:m128-n4096-k4096:fp4_sm90 $nv:m128-n4096-k4096:fp4_sm90:NIBBLE_FP4SM90_SPLIT=4 $nv:m128-n4096-k4096:fp4_sm90:NIBBLE_FP4SM90_KIND=wg64 $nv:m128-n4096-k4096:cublas_bf16"
runs="$runs $i4:m128-n4096-k14336:int4_gemm_sm90 $i4:m128-n4096-k14336:int4_gemm_sm90:NIBBLE_INT4SM90_BN=64"
# 128 x 128 tiles of two consumer warpgroups (never the default yet) on the shapes cuBLAS leads and two it trails
w2=NIBBLE_FP4SM90_KIND=wg128x2 i2=NIBBLE_INT4SM90_BN=128,NIBBLE_INT4SM90_ROWS=128
runs="$runs $nv:m128-n3072-k3072:fp4_sm90:$w2 $nv:m128-n4096-k4096:fp4_sm90:$w2 $nv:m128-n8192-k3072:fp4_sm90:$w2"
runs="$runs $i4:m128-n1024-k3072:int4_gemm_sm90:$i2 $i4:m128-n4096-k14336:int4_gemm_sm90:$i2 $i4:m128-n1024-k3072:int4_gemm_cublas_bf16"
for cfg in $(build-hopper/bin/nibble configs | awk '$2 ~ /^m128-/ && $1 != "megakernel-int4-weight-decode" {print $1 ":" $2}'); do
  case "$cfg" in $nv:m128-n3072-k3072 | $nv:m128-n4096-k4096 | $i4:m128-n4096-k14336) continue ;; esac
  [ "${cfg%%:*}" = $i4 ] && runs="$runs $cfg:int4_gemm_sm90" || runs="$runs $cfg:fp4_sm90"
done
timeout $(( ${NIBBLE_CALL_S:-290} - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh build-hopper "$NIBBLE_SOURCE_COMMIT" \
  "$runs" none > "$OUT/m128-default.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
grep -vE "^grade " "$OUT/m128-default.log" | tail -40
