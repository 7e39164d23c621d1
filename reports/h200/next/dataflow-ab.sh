#!/usr/bin/env bash
# dataflow-ab.sh: the megakernel v2 at <commit> against earlier builds of it in one device call
# (<= 590 s; issue 21), into $OUT (one archive, dataflow-ab.tar):
#   1. build nibble, both megakernel solutions, v2's tiny and stress tests and bench_dataflow (PREBUILT=1:
#      none, build-hopper/bin and lib carried from the CPU machine; below);
#   2. v2's tiny test (the fp64 oracle through the grader; a protocol that hangs is cut at 120 s);
#   3. full, seed 0, graded in turn: each BASE (an earlier build's libnibble_megakernel_dataflow.so,
#      carried: build it on the CPU machine at its commit and pass name=path), this build, this build
#      with each of VARIANTS (env assignments, space-separated, "" for none; default: the head at one producer
#      lane, NIBBLE_DF_PRODUCERS=1), then the bases and this build again (ROUNDS=2, the default:
#      the machine drifts), then v1 (the bar; V1=0 leaves it out, and out of the build); the last grade
#      of this build traced (NIBBLE_DF_TRACE), and once more with each of TRACED_VARIANTS (env
#      assignments, space-separated; default none);
#   4. bench_dataflow's consumer rows (the consumers from shared memory: all, no math, no flush) when
#      BENCH=1;
#   5. v2's stress test (full, seeds 0 and 1, 2048 steps twice, bitwise equal) with the time left.
#   bash reports/h200/next/dataflow-ab.sh <commit> [<name>=<base .so> ...]
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
shift
BASES=("$@")  # none: this build against its VARIANTS only (e.g. an on/off switch's A/B)
t0=$(date +%s)
left() { echo $(( ${BUDGET:-580} - ($(date +%s) - t0) )); }  # BUDGET: seconds this script may take
targets="nibble nibble_reference nibble_megakernel_dataflow test_megakernel_dataflow_decode_tiny test_megakernel_dataflow_decode_stress"
[ "${V1:-1}" = 1 ] && targets="$targets nibble_megakernel"
[ "${BENCH:-0}" = 1 ] && targets="$targets bench_dataflow"
B=build-hopper
export NIBBLE_BINARY_DIR=$PWD/$B NIBBLE_SOURCE_DIR=$PWD
if [ "${PREBUILT:-0}" = 1 ]; then
  # PREBUILT=1: build-hopper/bin and lib carried from the CPU machine (no build, ~3 min less on a
  # fresh machine; no test binaries): v2's correctness from a tiny grade (the gate against the fp32
  # reference, both seeds) instead of the oracle test, and no stress test.
  timeout 120 $B/bin/nibble grade --config tiny --seeds 0,1 -q --solution $B/lib/libnibble_megakernel_dataflow.so \
    --out "$OUT/tiny-dataflow.json" > "$OUT/tiny-dataflow.log" 2>&1
  tiny=$?; echo "v2 tiny grade: exit $tiny $(grep -m1 disposition "$OUT/tiny-dataflow.log")"
else
  source reports/h200/next/build.sh $targets
  timeout 120 $B/tests/test_megakernel_dataflow_decode_tiny > "$OUT/tiny-dataflow.log" 2>&1
  tiny=$?; echo "v2 tiny: exit $tiny"; grep -E "OK|FAILED|Failure" "$OUT/tiny-dataflow.log" | head -10
fi
grade() {  # name, .so, env...: full, seed 0
  local name=$1 so=$2; shift 2
  timeout 150 env "$@" $B/bin/nibble grade --config full --seeds 0 -q --solution "$so" --out "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(grep -m2 -E 'disposition|time/token' "$OUT/$name.log" | tr '\n' ' ')"
}
NEW=$B/lib/libnibble_megakernel_dataflow.so
if [ $tiny -eq 0 ]; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for b in "${BASES[@]+"${BASES[@]}"}"; do grade "${b%%=*}-r$round" "${b#*=}"; done
    grade "new-r$round" "$NEW"
    if [ $round = 1 ]; then
      for v in ${VARIANTS-NIBBLE_DF_PRODUCERS=1}; do grade "new-$(printf %s "$v" | tr -c 'A-Za-z0-9_.=-' '_')-r$round" "$NEW" "$v"; done
    fi
  done
  : > /dev/shm/nibble-df-trace-new.txt  # made here: the child writes a file under /dev, makes none
  grade new-traced "$NEW" NIBBLE_DF_TRACE=/dev/shm/nibble-df-trace-new.txt
  [ -f /dev/shm/nibble-df-trace-new.txt ] && mv /dev/shm/nibble-df-trace-new.txt "$OUT/trace-new.txt" && cat "$OUT/trace-new.txt"
  for v in ${TRACED_VARIANTS:-}; do
    n=$(printf %s "$v" | tr -c 'A-Za-z0-9_.=-' '_')
    : > /dev/shm/nibble-df-trace-v.txt
    grade "new-traced-$n" "$NEW" "$v" NIBBLE_DF_TRACE=/dev/shm/nibble-df-trace-v.txt
    [ -f /dev/shm/nibble-df-trace-v.txt ] && mv /dev/shm/nibble-df-trace-v.txt "$OUT/trace-new-$n.txt" && cat "$OUT/trace-new-$n.txt"
  done
  [ "${V1:-1}" = 1 ] && grade v1 $B/lib/libnibble_megakernel.so
fi
if [ $tiny -eq 0 ] && [ "${BENCH:-0}" = 1 ] && [ "$(left)" -gt 200 ]; then
  timeout 120 $B/bin/bench_dataflow --benchmark_filter='Consumer' --benchmark_out="$OUT/bench-dataflow.json" \
    --benchmark_out_format=json > "$OUT/bench-dataflow.txt" 2>&1; echo "bench_dataflow: exit $?"; cat "$OUT/bench-dataflow.txt"
fi
if [ $tiny -eq 0 ] && [ "${PREBUILT:-0}" != 1 ] && [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 20 )) $B/tests/test_megakernel_dataflow_decode_stress > "$OUT/stress-dataflow.log" 2>&1
  echo "v2 stress: exit $? $(grep -E 'run twice|Failure|differing|OK|FAILED' "$OUT/stress-dataflow.log" | tr '\n' ' ')"
fi
# The device returns a limited number of files: everything in one archive.
tar cf "$OUT/dataflow-ab.tar" -C "$OUT" --exclude dataflow-ab.tar . && find "$OUT" -type f ! -name dataflow-ab.tar -delete
echo "dataflow-ab.sh done in $(( $(date +%s) - t0 )) s"
