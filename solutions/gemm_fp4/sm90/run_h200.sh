#!/usr/bin/env bash
# run_h200.sh: one device call's worth of work for gemm_fp4_sm90 (NOTES.md): the GPU test of the
# solution against the fp64 oracle, then nibble grade of it and of the cuBLAS bf16 comparison point
# at the shapes given, one JSON report each, bundled into $OUT/reports.tar (the device tool returns at
# most 8 files), and a table of median us / TFLOP/s / TB/s / error last.
#
#   solutions/gemm_fp4/sm90/run_h200.sh BUILD_DIR COMMIT "task:config:solution[:VAR=V,VAR=V] ..." [test-filter]
# solution: fp4_sm90 | fp4_stream (the experiment) | cublas_bf16 | baseline (libnibble_gemm_<solution>.so), or any
# other bundled library by its name after libnibble_ (int4_gemm_baseline_awq); the optional 4th field sets environment variables for
# that grade (e.g. NIBBLE_FP4SM90_KIND=wg64,NIBBLE_FP4SM90_SPLIT=8) and names its report. A build made on the CPU machine runs there unchanged
# (GPU-FACTS.md): carry BUILD_DIR/{bin,lib,tests/test_gemm_solutions_gpu}.
set -u
B=${1:?build dir}
export NIBBLE_SOURCE_COMMIT=${2:?commit}
RUNS=${3:?runs}
FILTER=${4:-*Fp4Sm90*}
OUT=${OUT:-/tmp/out}
R=$(mktemp -d)/rep
mkdir -p "$OUT" "$R"
pack() { tar -C "$(dirname "$R")" -cf "$OUT/.reports.tar.part" rep && mv -f "$OUT/.reports.tar.part" "$OUT/reports.tar"; }  # never half written
# A caller's timeout (a device call's time running out) still gets the reports graded so far: the
# archive is rewritten after every grade (a kill of any kind, of this script or of its caller, leaves
# it whole up to the last grade; 2026-12-06 a caller's outer timeout lost 23 grades), and on TERM
# bash runs the trap once the grade in progress ends (each has its own 60 s limit).
trap 'pack; echo "run_h200.sh: stopped by TERM; the reports graded so far are in reports.tar" >&2; exit 143' TERM
failed=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if [ "$FILTER" != none ]; then
  timeout 120 "$B/tests/test_gemm_solutions_gpu" --gtest_filter="$FILTER" >"$OUT/gputest.log" 2>&1
  echo "gpu test exit $?"
  grep -E "relerr|FAILED|PASSED|SKIPPED|Failure|error" "$OUT/gputest.log" | grep -v "^\[ *OK" | head -60
fi
for r in $RUNS; do
  IFS=: read -r task cfg sol envs <<<"$r"
  tag=$sol${envs:+-$(echo "$envs" | tr -c 'A-Za-z0-9\n' '_' | sed -E 's/NIBBLE_(FP4|INT4)SM90_//g')}
  out="$R/$task-$cfg-$tag.json"
  lib="$B/lib/libnibble_gemm_$sol.so"
  [ -f "$lib" ] || lib="$B/lib/libnibble_$sol.so"
  s=$(date +%s%N)
  timeout 60 env ${envs//,/ } "$B/bin/nibble" grade --task "$task" --config "$cfg" --seeds 0 -q --max-rounds 5 --step-timeout 5 \
    --timeout 50 --solution "$lib" --out "$out" >"$R/$task-$cfg-$tag.log" 2>&1
  rc=$?
  echo "grade $task $cfg $tag exit $rc ($(( ($(date +%s%N) - s) / 1000000 )) ms)"
  [ $rc -le 1 ] || failed=$((failed + 1))  # 0 Passed, 1 graded (another disposition); 2+: not graded
  pack
done
pack
python3 - "$R" <<'EOF'
import json, os, sys
d = sys.argv[1]
print(f"{'task':17} {'config':18} {'report':34} {'disp':12} {'us':>9} {'TFLOP/s':>8} {'TB/s':>6} {'relerr':>9}")
for f in sorted(os.listdir(d)):
    if not f.endswith(".json"):
        continue
    r = json.load(open(os.path.join(d, f)))
    t = r.get("timing") or {}
    sol = f[len(r["task"]) + len(r["config"]) + 2:-5]
    us = t.get("us_per_call", float("nan"))
    print(f"{r['task']:17} {r['config']:18} {sol[:34]:34} {str(r.get('disposition'))[:12]:12} {us:9.2f} "
          f"{t.get('tflops', float('nan')):8.1f} {t.get('achieved_bandwidth_Bps', float('nan')) / 1e12:6.2f} "
          f"{r['correctness'].get('worst_rel_err', float('nan')):9.2e}  {str(r.get('reason'))[:60]}")
EOF
table_rc=$?
[ "$failed" -eq 0 ] || { echo "run_h200.sh: $failed grade(s) did not run (exit 2 or more; their logs are in reports.tar)" >&2; exit 2; }
exit $table_rc
