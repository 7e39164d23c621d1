#!/usr/bin/env bash
# gemm-ab.sh: one device call (<= 590 s), into $OUT (reports.tar and the tables in the log):
#   1. issue 25: gemm_fp4_sm90 at M = 4097 on the residue shapes with its tail (the default since
#      the fourth session of 2026-12-05) and without (NIBBLE_FP4SM90_TAIL=0), beside cuBLAS bf16 and
#      gemm_fp4_sm90 at M = 4096, both FP4 tasks;
#   2. issue 24: int4_gemm_sm90 on the two M = 4096 shapes it lost to cuBLAS at 86c7d66
#      (n1024-k3072 0.63x, n14336-k4096 0.99x), beside cuBLAS bf16; at n1024 with the alternatives:
#      the plan no longer splits K into a second wave there (eighth session; SPLIT=2 is the old
#      plan) and BN=128 (n14336's alternatives lost by 40-60% on the H100: not run again);
#   3. a profiled grade (--profile ncu) of int4_gemm_sm90 at m4096-n1024-k3072: where the 0.63x goes.
# Configure with NIBBLE_CMAKE_ARGS as final.sh does.
#   bash reports/h200/next/gemm-ab.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16 test_gemm_solutions_gpu
runs=""
for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
  for nk in n3000-k3072 n3000-k3080 n3072-k3080; do
    runs="$runs $task:m4097-$nk:fp4_sm90 $task:m4097-$nk:fp4_sm90:NIBBLE_FP4SM90_TAIL=0"
    runs="$runs $task:m4097-$nk:cublas_bf16 $task:m4096-$nk:fp4_sm90"
  done
done
cfg=m4096-n1024-k3072
runs="$runs gemm-w4a16-int4:$cfg:int4_gemm_sm90 gemm-w4a16-int4:$cfg:int4_gemm_sm90:NIBBLE_INT4SM90_BN=128"
runs="$runs gemm-w4a16-int4:$cfg:int4_gemm_sm90:NIBBLE_INT4SM90_SPLIT=2 gemm-w4a16-int4:$cfg:int4_gemm_cublas_bf16"
runs="$runs gemm-w4a16-int4:m4096-n14336-k4096:int4_gemm_sm90 gemm-w4a16-int4:m4096-n14336-k4096:int4_gemm_cublas_bf16"
timeout $(( 490 - ($(date +%s) - t0) )) bash solutions/gemm_fp4/sm90/run_h200.sh build-hopper "$NIBBLE_SOURCE_COMMIT" \
  "$runs" '*Fp4Sm90*' > "$OUT/gemm-ab.log" 2>&1
echo "run_h200.sh exit $? ($(( $(date +%s) - t0 )) s)"
tail -60 "$OUT/gemm-ab.log"
left=$(( 585 - ($(date +%s) - t0) ))
if [ "$left" -gt 60 ]; then
  mkdir -p "$OUT/profile"
  timeout $(( left - 10 )) build-hopper/bin/nibble grade --task gemm-w4a16-int4 --config $cfg --seeds 0 -q \
    --solution build-hopper/lib/libnibble_int4_gemm_sm90.so --profile ncu --out "$OUT/profile/int4-sm90-$cfg.json" \
    > "$OUT/profile.log" 2>&1
  echo "profile: exit $?"; tail -5 "$OUT/profile.log"
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])).get('profile',{}); print(p.get('status')); [print(k) for k in p.get('top_kernels',[])]" \
    "$OUT/profile/int4-sm90-$cfg.json" 2>&1 | head -8
fi
