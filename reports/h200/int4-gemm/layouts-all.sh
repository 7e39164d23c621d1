#!/usr/bin/env bash
# layouts-all.sh: what issue 24 still needs after run-86c7d66/, in one device call (<= 590 s):
#   1. every layout's baseline (awq, gptq, gptq with g_idx, compressed-tensors) on every official
#      gemm-w4a16-int4 config at M = 1, 16 and 128 (the M = 4096 ones take the call's time: then
#      FILTER='^gemm-w4a16-int4 m4096' in a call of its own), reports packed into layouts.tar;
#   2. `calibrate --path gpu` on the M = 1 configs with what is left.
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/int4-gemm/layouts-all.sh <commit> [FILTER]
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
filter=${2:-'^gemm-w4a16-int4 m(1|16|128)-'}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
mkdir -p "$OUT/layouts"
OUT="$OUT/layouts" FILTER="$filter" timeout $(( 480 - ($(date +%s) - t0) )) bash scripts/gemm-all.sh build-hopper \
  int4_gemm_baseline_awq int4_gemm_baseline_gptq int4_gemm_baseline_gptq_g_idx int4_gemm_baseline_compressed_tensors \
  > "$OUT/layouts.log" 2>&1
echo "layouts exit $? ($(( $(date +%s) - t0 )) s)"; grep -c " exit 0 " "$OUT/layouts.log"; grep -v " exit 0 " "$OUT/layouts.log" | grep "^grade" | head
# The device returns a limited number of files: the reports go back as one archive.
tar cf "$OUT/layouts.tar" -C "$OUT" layouts && rm -rf "$OUT/layouts"
left=$(( 570 - ($(date +%s) - t0) ))
[ $left -gt 30 ] && OUT="$OUT/calibration" CALIBRATE=1 FILTER='^gemm-w4a16-int4 m1-' timeout $left bash scripts/gemm-all.sh build-hopper \
  > "$OUT/calibration.log" 2>&1
echo "calibration exit $?"; grep -E "gate health" "$OUT/calibration.log" | sort | uniq -c
[ -d "$OUT/calibration" ] && tar czf "$OUT/calibration.tgz" -C "$OUT" calibration && rm -rf "$OUT/calibration"
echo "layouts-all.sh done in $(( $(date +%s) - t0 )) s"
