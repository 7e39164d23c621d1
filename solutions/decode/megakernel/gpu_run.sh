#!/usr/bin/env bash
# gpu_run.sh: one call on the GPU machine for the megakernel: build, the stage tests, the tiny
# decode test, grades (tiny, full seeds 0,1), the block benchmark. Everything it prints goes to
# $OUT/log.txt too; reports to $OUT/mk-<config>.json, the benchmark to $OUT/bench.json.
#   STEPS=build,stages,tiny,gtiny,gfull,bench,mma,report,ab (default: build,stages,tiny,gtiny,gfull,bench)
#   TIMING_S=seconds of timing per grade
#   report: the untraced grade of the full config, seeds 0 and 1, that README and NOTES quote
#           ($OUT/megakernel-full.json; set NIBBLE_SOURCE_COMMIT to this checkout's commit, taken on
#           the CPU machine: the device copy's .git may be stale)
#   ab:     AB="ENV.. | ENV.." (configs separated by '|'), each graded by ab.sh (seed 0, untraced),
#           the whole list twice, interleaved; reports and logs in $OUT/ab/r1, r2
#   PACK=1: everything under $OUT packed into $OUT/mk-out.tgz besides the log and the report (the
#           device tool brings back at most 8 files)
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
if has tiny; then  # as the CTest entries (tests/decode/megakernel.cmake)
  run 60 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_CHUNK=1:1 NIBBLE_MK_SPLIT=1 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_OCOMB=1 NIBBLE_MK_CHUNK=1:1 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_KVPF=1 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_OCOMB=1 NIBBLE_MK_KVPF=1 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_PFSM=4 $B/tests/test_megakernel_decode_tiny
  run 60 env NIBBLE_MK_PFSM=4 NIBBLE_MK_OCOMB=1 NIBBLE_MK_CHUNK=1:1 $B/tests/test_megakernel_decode_tiny
fi
has gtiny && run 60 $B/bin/nibble grade --config tiny --seeds 0,1 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-tiny.json" --max-timing-seconds 2
if has gfull; then
  # traces in /dev/shm: the graded child's sandbox writes nowhere else
  : > /dev/shm/nibble-mk-trace.txt; : > /dev/shm/nibble-mk-trace0.txt  # the graded child writes files under /dev, makes none
  run 100 env NIBBLE_MK_BARRIER=1 NIBBLE_MK_TRACE=/dev/shm/nibble-mk-trace.txt $B/bin/nibble grade --config full --seeds 0,1 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-full.json" --max-timing-seconds "$TIMING_S"
  mv /dev/shm/nibble-mk-trace.txt "$OUT/trace.txt" && cat "$OUT/trace.txt" | tee -a "$OUT/log.txt"
fi
if has gfull0; then  # the generation barrier, for comparison
  run 100 env NIBBLE_MK_BARRIER=0 NIBBLE_MK_TRACE=/dev/shm/nibble-mk-trace0.txt $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/mk-full-b0.json" --max-timing-seconds "$TIMING_S"
  mv /dev/shm/nibble-mk-trace0.txt "$OUT/trace0.txt" && cat "$OUT/trace0.txt" | tee -a "$OUT/log.txt"
fi
has bench && run 60 $B/bin/bench_megakernel_blocks --benchmark_min_time=0.2 --benchmark_out="$OUT/bench.json" --benchmark_out_format=json
has mma && run 60 $B/bin/bench_mma_latency --benchmark_out="$OUT/bench-mma.json" --benchmark_out_format=json
has report && run 120 $B/bin/nibble grade --config full --seeds 0,1 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/megakernel-full.json"
if has ab; then
  IFS='|' read -r -a cfgs <<< "${AB:?ab: set AB=\"ENV.. | ENV..\"}"
  for round in 1 2; do
    for cfg in "${cfgs[@]}"; do
      cfg=$(echo "$cfg" | xargs)  # trim
      OUT="$OUT/ab/r$round" B=$B bash solutions/decode/megakernel/ab.sh "$cfg" 2>&1 | sed "s/^/[round $round] /" | tee -a "$OUT/log.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || failed=$((failed + 1))
    done
  done
fi
log "done, $failed step(s) failed"
if [ "${PACK:-0}" = 1 ]; then
  tar czf /tmp/mk-out.tgz -C "$OUT" --exclude=log.txt --exclude=megakernel-full.json . && mv /tmp/mk-out.tgz "$OUT/"
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name log.txt ! -name megakernel-full.json ! -name mk-out.tgz -exec rm -rf {} +
fi
[ "$failed" -eq 0 ]
