#!/usr/bin/env bash
# dataflow.sh: the megakernel v2's (megakernel-dataflow, issue 21) first GPU call (<= 590 s), into $OUT:
#   1. build nibble, both megakernel solutions and their tiny tests;
#   2. the bundled-solution tiny test of v2 (the fp64 oracle, 8 steps; a protocol that hangs is cut at
#      120 s), then v1's in the same call;
#   3. when it passed: a grade of full, seed 0, v2 with 8 producer lanes (15 consumer warps), again
#      with one producer lane (NIBBLE_DF_PRODUCERS=1, the default since 2026-12-05), with
#      its pages summed by atomics in no order (NIBBLE_DF_ORDER=0: what the bitwise order costs), then
#      v1 (the grader's watchdog cuts a hang), then bench_dataflow (the step, the GEMV over all layers,
#      the consumers from shared memory, each at 1 and 8 producer lanes; the consumer's handshake
#      alone and its math without the flush), then v2's stress test
#      (issue 21 step 4: full, seeds 0 and 1, every position from prefill to the cache's end, run
#      twice, bitwise equal);
#   4. seeds 0, 1 of v1 (v20's report the README quotes) if time is left.
#   bash reports/h200/next/dataflow.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - t0) )); }
source reports/h200/next/build.sh nibble nibble_reference nibble_megakernel nibble_megakernel_dataflow test_megakernel_dataflow_decode_tiny test_megakernel_decode_tiny test_megakernel_dataflow_decode_stress bench_dataflow
B=build-hopper
export NIBBLE_BINARY_DIR=$PWD/$B NIBBLE_SOURCE_DIR=$PWD
timeout 120 $B/tests/test_megakernel_dataflow_decode_tiny > "$OUT/tiny-dataflow.log" 2>&1
tiny=$?; echo "v2 tiny: exit $tiny"; grep -E "step|OK|FAILED|Failure" "$OUT/tiny-dataflow.log" | head -20
timeout 60 $B/tests/test_megakernel_decode_tiny > "$OUT/tiny-v1.log" 2>&1; echo "v1 tiny: exit $?"
if [ $tiny -eq 0 ]; then
  for run in "megakernel_dataflow 15 8 1" "megakernel_dataflow 15 1 1" "megakernel_dataflow 15 8 0" "megakernel 0 0 1"; do
    set -- $run
    n=$1-$2w-$3p-order$4
    # the trace in /dev/shm: the graded child's sandbox writes nowhere else
    : > /dev/shm/nibble-df-trace-$n.txt  # made here: the child writes a file under /dev, makes none
    timeout 150 env NIBBLE_DF_WARPS=${2/#0/15} NIBBLE_DF_PRODUCERS=${3/#0/8} NIBBLE_DF_ORDER=$4 \
      NIBBLE_DF_TRACE=/dev/shm/nibble-df-trace-$n.txt \
      $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_$1.so --out "$OUT/$n-full-seed0.json" \
      > "$OUT/$n-full-seed0.log" 2>&1
    echo "$1 ($2 warps, $3 producer lanes, order $4) full seed 0: exit $? $(grep -m2 -E 'disposition|time/token' "$OUT/$n-full-seed0.log" | tr '\n' ' ')"
    [ -f /dev/shm/nibble-df-trace-$n.txt ] && mv /dev/shm/nibble-df-trace-$n.txt "$OUT/trace-$n.txt" && cat "$OUT/trace-$n.txt"
  done
fi
if [ $tiny -eq 0 ] && [ "$(left)" -gt 250 ]; then
  # v2's three rates (issue 21): the step, the GEMV over all layers, the consumers from shared memory
  timeout 170 $B/bin/bench_dataflow --benchmark_out="$OUT/bench-dataflow.json" \
    --benchmark_out_format=json > "$OUT/bench-dataflow.txt" 2>&1; echo "bench_dataflow: exit $?"; cat "$OUT/bench-dataflow.txt"
fi
if [ $tiny -eq 0 ] && [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 100 )) $B/tests/test_megakernel_dataflow_decode_stress > "$OUT/stress-dataflow.log" 2>&1
  echo "v2 stress: exit $? $(grep -E 'run twice|Failure|differing' "$OUT/stress-dataflow.log" | tr '\n' ' ')"
fi
[ "$(left)" -gt 100 ] && timeout $(( $(left) - 10 )) $B/bin/nibble grade --config full --seeds 0,1 -q \
  --solution $B/lib/libnibble_megakernel.so --out "$OUT/megakernel-full.json" > "$OUT/megakernel-full.log" 2>&1 && \
  echo "v20 seeds 0, 1: $(grep -m2 -E 'disposition|time/token' "$OUT/megakernel-full.log" | tr '\n' ' ')"
# The device returns a limited number of files: everything in one archive (2026-12-05: nine were left out).
tar cf "$OUT/dataflow.tar" -C "$OUT" --exclude dataflow.tar . && find "$OUT" -type f ! -name dataflow.tar -delete
echo "dataflow.sh done in $(( $(date +%s) - t0 )) s"
