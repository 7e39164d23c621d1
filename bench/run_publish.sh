#!/usr/bin/env bash
# run_publish.sh: the one GPU call of issue 21 step 2 (bench/bench_publish.cu). Run from the repository
# root on the H200 machine; writes under $OUT (the GPU runner sets it; default ./out/publish):
#   publish-table.txt   the table (scheme x in-flight bytes x pair streaming/quiet: one-way latency
#                       median/p90 in ns and cycles, the stream's TB/s meanwhile), 8 KB stream stages
#   publish.json        the same, every field (--json)
#   publish-2176.txt/.json  five schemes again with the megakernel's 2176-byte ring stages
#   nvidia-smi-clock-before.txt / -after.txt   `nvidia-smi -q -d CLOCK | head -40` around the runs
#   bench_publish.sass  the kernels' SASS (what each fence and wait became), build/run logs
# Builds only bench_publish (cmake --preset hopper; falls back to nvcc on the one file when the bench/
# folder is not configured, e.g. no Google Benchmark). Every step has a time limit; the whole call
# takes ~1 minute (build ~20-60 s, runs ~10 s); the time limits keep it under 4 minutes whatever fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out/publish}
mkdir -p "$OUT"
LOG="$OUT/run_publish.log"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
t_start=$(date +%s)
# seconds left of the call's 225 (under the 4 minutes asked, with room for the last steps), capped at
# $1, at least 1 (`timeout 0` would mean no limit)
left() {
  local l=$((225 - ($(date +%s) - t_start)))
  l=$((l < $1 ? l : $1))
  echo $((l < 1 ? 1 : l))
}

say "run_publish.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname), $(date -u +%FT%TZ)"
timeout 10 nvidia-smi -q -d CLOCK 2>&1 | head -40 >"$OUT/nvidia-smi-clock-before.txt"

# shellcheck disable=SC1091
source scripts/env.sh
BIN=build-hopper/bin/bench_publish
if timeout 130 bash -c "cmake --preset hopper >'$OUT/cmake-configure.log' 2>&1 &&
                         cmake --build build-hopper -j16 --target bench_publish >'$OUT/cmake-build.log' 2>&1"; then
  say "built $BIN with cmake ($(($(date +%s) - t_start)) s)"
else
  say "cmake build failed or bench_publish not configured (tail of the logs below); building with nvcc directly"
  tail -5 "$OUT/cmake-configure.log" "$OUT/cmake-build.log" 2>/dev/null | tee -a "$LOG"
  BIN="$OUT/bench_publish"
  timeout "$(left 75)" nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I. -Ibench \
    bench/bench_publish.cu -o "$BIN" >"$OUT/nvcc-build.log" 2>&1 ||
    { say "nvcc build failed:"; tail -30 "$OUT/nvcc-build.log" | tee -a "$LOG"; exit 1; }
  say "built $BIN with nvcc ($(($(date +%s) - t_start)) s)"
fi

rc=0
# main table: every scheme, {0, 96, 192} KB in flight, pair streaming and quiet, self-test first
timeout "$(left 75)" "$BIN" --json "$OUT/publish.json" 2>&1 | tee "$OUT/publish-table.txt"
rc1=${PIPESTATUS[0]}
say "bench_publish exit $rc1"
[ "$rc1" -eq 0 ] || rc=1
# the megakernel's ring stage (2176 B copies: 45 / 90 stages in flight), if the call has time left
if [ "$(left 30)" -ge 30 ]; then
  timeout 30 "$BIN" --stage-bytes 2176 --no-selftest --only a_relacq,b_bulk_fence,c_ll8,d_selfcount,e_cluster \
    --json "$OUT/publish-2176.json" 2>&1 | tee "$OUT/publish-2176.txt"
  rc2=${PIPESTATUS[0]}
  say "bench_publish --stage-bytes 2176 exit $rc2"
  [ "$rc2" -eq 0 ] || rc=1
else
  say "skipped the 2176-byte-stage run: under 30 s left of the call"
fi

timeout 10 nvidia-smi -q -d CLOCK 2>&1 | head -40 >"$OUT/nvidia-smi-clock-after.txt"
if command -v cuobjdump >/dev/null 2>&1; then
  timeout 15 cuobjdump -sass "$BIN" >"$OUT/bench_publish.sass" 2>&1 || say "cuobjdump failed"
fi
say "done in $(($(date +%s) - t_start)) s, exit $rc"
exit $rc
