#!/usr/bin/env bash
# fp4-shapes.sh: one device call (<= 590 s): every official shape of both FP4 GEMM tasks graded with
# gemm_fp4_sm90 and the cuBLAS bf16 point (scripts/gemm-all.sh), after its kernels moved to the
# shared headers (solutions/common/{mma,wgmma}_dequant_gemm.cuh; the 28 split-K wgmma kernels compile
# differently, NOTES.md 2026-12-05). Writes into $OUT:
#   grades.log, reports.tar    the grades
#   ratios.md                  scripts/gemm_ratios.py: time, floor multiple, ratio to cuBLAS, issue 25's targets
#   before-after.md            gemm_fp4_sm90 per shape against the committed reports/h200/gemm/shapes/
#                              (another machine and day: a few % either way is the machine)
# Configure with NIBBLE_CMAKE_ARGS as final.sh does.
#   bash reports/h200/next/fp4-shapes.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 --target nibble nibble_gemm_reference nibble_gemm_fp4_sm90 nibble_gemm_cublas_bf16 \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built ($(( $(date +%s) - t0 )) s)"
OUT="$OUT/g" FILTER='^gemm-(w4a16-nvfp4|bf16-mxfp4) ' timeout $(( 560 - ($(date +%s) - t0) )) \
  bash scripts/gemm-all.sh build-hopper fp4_sm90 cublas_bf16 > "$OUT/grades.log" 2>&1
echo "grades exit $? ($(( $(date +%s) - t0 )) s)"; tail -5 "$OUT/grades.log"
mv "$OUT/g/reports.tar" "$OUT/reports.tar" 2>/dev/null; rm -rf "$OUT/g"
x=$(mktemp -d) && tar -xf "$OUT/reports.tar" -C "$x" || exit 1
python3 scripts/gemm_ratios.py "$x/rep" > "$OUT/ratios.md"; echo "ratios exit $?"
python3 - "$x/rep" reports/h200/gemm/shapes > "$OUT/before-after.md" <<'PY'
import json, os, sys
new, old = sys.argv[1], sys.argv[2]
print("| report | before us | now us | now / before |\n|---|---:|---:|---:|")
for f in sorted(os.listdir(new)):
    if not f.endswith("-fp4_sm90.json") or not os.path.exists(os.path.join(old, f)):
        continue
    a, b = (json.load(open(os.path.join(d, f))) for d in (old, new))
    ta, tb = (r.get("timing", {}).get("us_per_call") for r in (a, b))
    if ta and tb:
        print(f"| {f[:-5]} | {ta:.2f} | {tb:.2f} | {tb / ta:.3f} |")
PY
cat "$OUT/ratios.md" "$OUT/before-after.md"
echo "fp4-shapes.sh done in $(( $(date +%s) - t0 )) s"
