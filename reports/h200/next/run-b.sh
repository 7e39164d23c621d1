#!/usr/bin/env bash
# The next GPU session's second call (<= 590 s), after the whole test command (final.sh): what issues
# 22 and 23 still need measured on the H200, into $OUT.
#   1. scripts/grade-default.sh: the megakernel with the PyTorch anchors beside it (reports/latest/,
#      lineup.html), the full fixtures built;
#   2. every bundled Python solution graded (tiny, and the decode ones on full);
#   3. nibble batch over the bundled .so on decode tiny/full and the GEMM shapes at M = 1 and 4096,
#      then the leaderboard (when `nibble leaderboard` is in the build);
#   4. a profiled grade (--profile ncu) of the megakernel on full.
# Configure with NIBBLE_CMAKE_ARGS (libseccomp from a carried package) before, as final.sh does.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - t0) )); }
source reports/h200/next/build.sh all
N=build-hopper/bin/nibble
echo "== 1. grade-default.sh ($(( $(date +%s) - t0 )) s)"
NIBBLE_PRESET=hopper NIBBLE_REPORTS="$OUT/latest" timeout $(( $(left) - 300 )) bash scripts/grade-default.sh > "$OUT/grade-default.log" 2>&1
echo "exit $?"; tail -12 "$OUT/grade-default.log"
echo "== 2. Python solutions ($(( $(date +%s) - t0 )) s)"
mkdir -p "$OUT/python"
for s in triton_gemv_graph tinygemm_graph dense_bf16_graph; do
  timeout 60 $N grade --config tiny --solution solutions/decode/python/$s.py --out "$OUT/python/decode-tiny-$s.json" -q > "$OUT/python/decode-tiny-$s.log" 2>&1
  echo "decode tiny $s: exit $? $(grep -m1 disposition "$OUT/python/decode-tiny-$s.log")"
done
[ "$(left)" -gt 200 ] && timeout 120 $N grade --config full --solution solutions/decode/python/triton_gemv_graph.py --out "$OUT/python/decode-full-triton_gemv_graph.json" -q > "$OUT/python/decode-full-triton.log" 2>&1 && echo "decode full triton: $(grep -m1 -E 'disposition|time/token' "$OUT/python/decode-full-triton.log")"
for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
  timeout 60 $N grade --task $task --config m16-n3072-k3072 --seeds 0 --clock wall --solution solutions/gemm_fp4/python/dequant_matmul.py --out "$OUT/python/$task-m16-dequant_matmul.json" -q > "$OUT/python/$task.log" 2>&1
  echo "$task m16 dequant_matmul: exit $? $(grep -m1 disposition "$OUT/python/$task.log")"
done
echo "== 3. batch ($(( $(date +%s) - t0 )) s)"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200|[a-z][0-9]+' | head -1 | tr A-Z a-z)
cat > "$OUT/batch.json" <<JSON
{"name": "${gpu:-gpu}", "out": "$OUT/batch", "timeout_seconds": 200,
 "runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny", "full"], "seeds": [0, 1],
           "solutions": ["$PWD/build-hopper/lib/libnibble_megakernel.so", "$PWD/build-hopper/lib/libnibble_unfused.so", "$PWD/build-hopper/lib/libnibble_reference.so"]},
          {"task": "gemm-w4a16-nvfp4", "configs": ["m1-n3072-k3072", "m4096-n3072-k3072"], "seeds": [0],
           "solutions": ["$PWD/build-hopper/lib/libnibble_gemm_fp4_sm90.so", "$PWD/build-hopper/lib/libnibble_gemm_cublas_bf16.so", "$PWD/build-hopper/lib/libnibble_gemm_baseline.so"]},
          {"task": "gemm-bf16-mxfp4", "configs": ["m1-n3072-k3072", "m4096-n3072-k3072"], "seeds": [0],
           "solutions": ["$PWD/build-hopper/lib/libnibble_gemm_fp4_sm90.so", "$PWD/build-hopper/lib/libnibble_gemm_cublas_bf16.so", "$PWD/build-hopper/lib/libnibble_gemm_baseline.so"]},
          {"task": "gemm-w4a16-int4", "configs": ["m1-n3072-k3072", "m4096-n3072-k3072"], "seeds": [0],
           "solutions": ["$PWD/build-hopper/lib/libnibble_int4_gemm_sm90.so", "$PWD/build-hopper/lib/libnibble_int4_gemm_baseline_plain.so", "$PWD/build-hopper/lib/libnibble_int4_gemm_baseline_awq.so", "$PWD/build-hopper/lib/libnibble_int4_gemm_cublas_bf16.so"]}]}
JSON
timeout $(( $(left) - 90 )) $N batch "$OUT/batch.json" > "$OUT/batch.log" 2>&1; echo "exit $?"; tail -8 "$OUT/batch.log"
$N leaderboard "$OUT/batch" --json "$OUT/leaderboard.json" > "$OUT/leaderboard.txt" 2>&1  # the batch wrote the page and .md
echo "leaderboard exit $?"; head -30 "$OUT/leaderboard.txt"
echo "== 4. profile ($(( $(date +%s) - t0 )) s)"
[ "$(left)" -gt 60 ] && timeout $(( $(left) - 10 )) $N grade --config full --seeds 0 --solution build-hopper/lib/libnibble_megakernel.so --profile ncu --out "$OUT/profile/megakernel-full.json" -q > "$OUT/profile.log" 2>&1
echo "exit $?"; tail -5 "$OUT/profile.log"
python3 -c "import json,sys; p=json.load(open(sys.argv[1])).get('profile',{}); print(p.get('status')); [print(k) for k in p.get('top_kernels',[])]" "$OUT/profile/megakernel-full.json" 2>&1 | head -8
# The device returns a limited number of files: the batch's folder (3 per job) goes back as one archive.
cp "$OUT/batch/${gpu:-gpu}.leaderboard.html" "$OUT/batch/${gpu:-gpu}.leaderboard.md" "$OUT/" 2>/dev/null
tar czf "$OUT/batch.tgz" -C "$OUT" batch && rm -rf "$OUT/batch"
# ... and so does the rest but the logs above (the twelfth session's call lost the Python reports,
# the lineup page and the profile to that limit).
rest=$(cd "$OUT" && ls -d latest python profile leaderboard.json leaderboard.txt profile.log 2>/dev/null)
[ -n "$rest" ] && tar czf "$OUT/run-b.tgz" -C "$OUT" $rest && (cd "$OUT" && rm -rf $rest)
echo "run-b.sh done in $(( $(date +%s) - t0 )) s"
