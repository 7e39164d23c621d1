#!/usr/bin/env bash
# run.sh: gemm-w4a16-int4 (issue 24) on the H200, one device call (<= 590 s) after the whole test
# command (../sandbox-ledger/final.sh, which runs the int4 GPU tests: every layout's baseline on
# tiny, tiny-sym and m16-n3000-k3200, the reference, the hostile GEMM cheats, the GPU calibration
# table against the oracle's, the fixture import's GPU path):
#   1. every official config graded with the tuned solution (int4_gemm_sm90: int4_gemm_mma's kernel
#      at M <= 16, whose reports give the fraction of the weight-read floor; the shared wgmma kernel
#      above, against cuBLAS bf16 at M = 128 and 4096), the baseline (plain) and the cuBLAS bf16
#      point, and the layouts' baselines at M = 1 and 16 on 3072 x 3072 (scripts/gemm-all.sh),
#      reports.tar, and ratios.md (scripts/gemm_ratios.py: the table of the note);
#   2. `nibble calibrate --path gpu` on the M = 16 configs (scripts/gemm-all.sh CALIBRATE=1).
# Configure with NIBBLE_CMAKE_ARGS (libseccomp from a carried package) as final.sh does.
#   bash reports/h200/int4-gemm/run.sh <commit>
# GRADE_SHAPES, LAYOUT_SHAPES and CALIBRATE_SHAPES (extended regexes on "task config", as gemm-all.sh's
# FILTER) replace the three steps' shapes, GRADE_SOLUTIONS step 1's solutions, e.g.
#   GRADE_SHAPES='^gemm-w4a16-int4 m(128|4096)-' GRADE_SOLUTIONS='int4_gemm_sm90 int4_gemm_cublas_bf16' \
#   LAYOUT_SHAPES='^gemm-w4a16-int4 m128-' CALIBRATE_SHAPES='^gemm-w4a16-int4 m(128|4096)-n3072-k3072$'
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
mkdir -p "$OUT/grades" "$OUT/calibration"
# 46 configs x 3 solutions at ~3 s a grade: all the call's time but the layouts' minute; the
# calibration only runs on what is left (run it in a call of its own if none is).
OUT="$OUT/grades" FILTER="${GRADE_SHAPES:-^gemm-w4a16-int4 }" timeout $(( 500 - ($(date +%s) - t0) )) bash scripts/gemm-all.sh build-hopper ${GRADE_SOLUTIONS:-int4_gemm_sm90 int4_gemm_baseline_plain int4_gemm_cublas_bf16} \
  > "$OUT/grades.log" 2>&1
echo "grades exit $? ($(( $(date +%s) - t0 )) s)"; tail -60 "$OUT/grades.log"
# The table of the note: time, TFLOP/s, floor multiple and ratio to cuBLAS bf16 per shape.
x=$(mktemp -d) && tar -xf "$OUT/grades/reports.tar" -C "$x" && \
  python3 scripts/gemm_ratios.py "$x/rep" --solution int4_gemm_sm90 --against int4_gemm_cublas_bf16 > "$OUT/ratios.md"
echo "ratios exit $?"; cat "$OUT/ratios.md"
OUT="$OUT/layouts" FILTER="${LAYOUT_SHAPES:-^gemm-w4a16-int4 m(1|16)-n3072-k3072\$}" timeout $(( 560 - ($(date +%s) - t0) )) bash scripts/gemm-all.sh build-hopper \
  int4_gemm_baseline_awq int4_gemm_baseline_gptq int4_gemm_baseline_gptq_g_idx int4_gemm_baseline_compressed_tensors \
  > "$OUT/layouts.log" 2>&1
echo "layouts exit $?"; tail -12 "$OUT/layouts.log"
left=$(( 570 - ($(date +%s) - t0) ))
[ $left -gt 30 ] && OUT="$OUT/calibration" CALIBRATE=1 FILTER="${CALIBRATE_SHAPES:-^gemm-w4a16-int4 m16-}" timeout $left bash scripts/gemm-all.sh build-hopper \
  > "$OUT/calibration.log" 2>&1
echo "calibration exit $?"; cat "$OUT/calibration.log" | tail -30
tar czf "$OUT/calibration.tgz" -C "$OUT" calibration && rm -rf "$OUT/calibration"
echo "run.sh done in $(( $(date +%s) - t0 )) s"
