#!/usr/bin/env bash
# fp4-m128.sh: issue 25's worst gap in one device call (<= 590 s), into $OUT: gemm_fp4_sm90 at M = 128
# is 0.62-0.84x cuBLAS bf16 (H200, ../gemm/shapes-f1b6328/), 4.3-5.8x the weight-read floor, so it is
# the kernel's organisation, not the bytes. Before a rewrite, what the existing switches give and
# where the time goes:
#   1. gemm-w4a16-nvfp4 at m128 on n3072-k3072 (0.63x), n3072-k8192 (0.70x) and n8192-k3072 (0.81x):
#      the default plan, every wgmma tile width (wg64, wg128, wg256) at K splits 1, 2, 4, 8 (wg256: 1,
#      2), and cuBLAS bf16 (reports.tar, the table in fp4-m128.log);
#   2. --profile ncu of the default and of cuBLAS at m128-n3072-k3072 (profile/*.json: the kernels,
#      their DRAM and tensor-pipe throughput and stall reasons; the grader's profile section).
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/fp4-m128.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_gemm_fp4_sm90 nibble_gemm_cublas_bf16
task=gemm-w4a16-nvfp4
runs=""
for nk in n3072-k3072 n3072-k8192 n8192-k3072; do
  runs="$runs $task:m128-$nk:fp4_sm90 $task:m128-$nk:cublas_bf16"
  for bn in 64 128 256; do
    for split in 1 2 4 8; do
      [ $bn = 256 ] && [ $split -gt 2 ] && continue
      runs="$runs $task:m128-$nk:fp4_sm90:NIBBLE_FP4SM90_KIND=wg$bn,NIBBLE_FP4SM90_SPLIT=$split"
    done
  done
done
timeout $(( 400 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh build-hopper "$NIBBLE_SOURCE_COMMIT" \
  "$runs" none > "$OUT/fp4-m128.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
tail -40 "$OUT/fp4-m128.log"
mkdir -p "$OUT/profile"
cfg=m128-n3072-k3072
for sol in fp4_sm90 cublas_bf16; do
  left=$(( 580 - ($(date +%s) - t0) ))
  [ "$left" -gt 40 ] || break
  timeout $(( left / 2 )) build-hopper/bin/nibble grade --task $task --config $cfg --seeds 0 -q \
    --solution build-hopper/lib/libnibble_gemm_$sol.so --profile ncu --out "$OUT/profile/$sol-$cfg.json" \
    > "$OUT/profile/$sol.log" 2>&1
  echo "profile $sol: exit $?"; tail -3 "$OUT/profile/$sol.log"
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])).get('profile',{}); print(p.get('status')); [print(k) for k in p.get('top_kernels',[])]" \
    "$OUT/profile/$sol-$cfg.json" 2>&1 | head -8
done
tar cf "$OUT/profile.tar" -C "$OUT" profile && rm -rf "$OUT/profile"
echo "fp4-m128.sh done in $(( $(date +%s) - t0 )) s"
