#!/usr/bin/env bash
# gpu_run.sh: one call on the GPU machine for the megakernel: build, the stage tests, the tiny
# decode test, grades (tiny, full seeds 0,1), the block benchmark. Everything it prints goes to
# $OUT/log.txt too; reports to $OUT/mk-<config>.json, the benchmark to $OUT/bench.json.
#   STEPS=build,stages,tiny,gtiny,gfull,bench,mma (default: all but mma)  TIMING_S=seconds of timing per grade
set -u
OUT=${OUT:-/tmp/mk-out}
mkdir -p "$OUT"
STEPS=${STEPS:-build,stages,tiny,gtiny,gfull,bench}
TIMING_S=${TIMING_S:-5}
failed=0
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }
run() {  # run <seconds> <cmd...>: output appended to the log, last lines echoed
  local t=$1; shift
  log "\$ $*"
  timeout "$t" "$@" >>"$OUT/log.txt" 2>&1
  local rc=$?
  log "rc=$rc"
  [ $rc -eq 0 ] || failed=$((failed + 1))
  return $rc
}
B=build-hopper
export NIBBLE_BINARY_DIR=$PWD/$B NIBBLE_SOURCE_DIR=$PWD
if has build; then
  run 150 bash -c "cmake --preset hopper -DNIBBLE_BUILD_BENCH=ON >/dev/null && cmake --build --preset hopper -j16 --target nibble nibble_reference nibble_megakernel test_megakernel_stages test_megakernel_decode_tiny bench_megakernel_blocks bench_mma_latency 2>&1 | grep -E 'error|warning|Linking' " || { tail -40 "$OUT/log.txt"; exit 1; }
fi
has stages && run 90 $B/tests/test_megakernel_stages --gtest_brief=1
has tiny && run 60 $B/tests/test_megakernel_decode_tiny
has gtiny && run 60 $B/bin/nibble grade --config tiny --seeds 0,1 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-tiny.json" --max-timing-seconds 2
if has gfull; then
  run 100 env NIBBLE_MK_BARRIER=1 NIBBLE_MK_TRACE="$OUT/trace.txt" $B/bin/nibble grade --config full --seeds 0,1 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-full.json" --max-timing-seconds "$TIMING_S"
  cat "$OUT/trace.txt" | tee -a "$OUT/log.txt"
fi
if has gfull0; then  # the generation barrier, for comparison
  run 100 env NIBBLE_MK_BARRIER=0 NIBBLE_MK_TRACE="$OUT/trace0.txt" $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-full-b0.json" --max-timing-seconds "$TIMING_S"
  cat "$OUT/trace0.txt" | tee -a "$OUT/log.txt"
fi
has bench && run 60 $B/bin/bench_megakernel_blocks --benchmark_min_time=0.2 --benchmark_out="$OUT/bench.json" --benchmark_out_format=json
has mma && run 60 $B/bin/bench_mma_latency --benchmark_out="$OUT/bench-mma.json" --benchmark_out_format=json
log "done, $failed step(s) failed"
[ "$failed" -eq 0 ]
