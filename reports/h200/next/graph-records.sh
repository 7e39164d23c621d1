#!/usr/bin/env bash
# graph-records.sh: whether CUPTI's per-node records are what slows a CUDA graph of thousands of
# kernels inside the grader, and what `nibble grade --graph-records graphs` changes, in one device
# call (~4-6 min), into $OUT:
#   1. probe_cupti_launches (its section 5: a 2,000-node graph of empty kernels timed by CUDA events
#      with no record kind on, CONCURRENT_KERNEL, GRAPH_TRACE alone and both; which records each
#      mode leaves);
#   2. test_grade_gpu's AGraphIsRecordedWholeOrByItsNodes (the hostile suite's honest `graph` row in
#      both modes: Passed, the audit satisfied, graph records instead of kernel records), and the
#      hostile rows of the record modes (graph_trace_self by nodes: InvalidTiming; the whole_hide_* rows
#      by graphs, five graph shapes: Passed with the 40 us they launch in the busy time);
#   3. the decode anchors (tinygemm_graph.py, dense_bf16_graph.py) and the megakernel (one kernel: the
#      control, the same in both modes) on full, seed 0, by nodes then by graphs, twice.
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/graph-records.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - t0) )); }
source reports/h200/next/build.sh nibble nibble_python_decode nibble_megakernel probe_cupti_launches test_grade_gpu \
  test_hostile_gpu hostile_solutions
B=build-hopper
echo "== 1. probe_cupti_launches ($(( $(date +%s) - t0 )) s)"
timeout 60 $B/bin/probe_cupti_launches > "$OUT/probe-cupti-launches.log" 2>&1
echo "exit $?"
grep -A12 -E "^== (cuptiActivityEnable|cudaGraphLaunch of the (3-kernel|mixed) graph, GRAPH_TRACE|runtime <<<>>> x2 \(outside)" \
  "$OUT/probe-cupti-launches.log" | head -60
grep -E "^graph of|^host time" "$OUT/probe-cupti-launches.log"
echo "== 2. test_grade_gpu, the graph row in both modes ($(( $(date +%s) - t0 )) s)"
(cd $B && NIBBLE_SOURCE_DIR=$OLDPWD timeout 240 tests/test_grade_gpu --gtest_filter='*AGraphIsRecordedWholeOrByItsNodes*') > "$OUT/grade-gpu-graph.log" 2>&1  # as ctest runs it: ./bin/nibble
echo "exit $?"; grep -E "graph-records|OK|FAILED|Failure|Expected|Which is|actual" "$OUT/grade-gpu-graph.log" | head -20
NIBBLE_SOURCE_DIR=$PWD NIBBLE_BINARY_DIR=$PWD/$B timeout 300 $B/tests/test_hostile_gpu \
  --gtest_filter='*/control:*/graph:*graph_trace_self*:*whole_hide_*:HostileTiming.*' > "$OUT/hostile-graph-rows.log" 2>&1
echo "hostile rows: exit $?"; grep -E "^\s+(control|graph|graph_trace_self|whole_hide_\w+) |caught as expected|FAILED|Failure" \
  "$OUT/hostile-graph-rows.log" | head -30
echo "== 3. graded by nodes and by graphs ($(( $(date +%s) - t0 )) s)"
mkdir -p "$OUT/grades"
for round in 1 2; do
  for s in solutions/decode/python/tinygemm_graph.py solutions/decode/python/dense_bf16_graph.py $B/lib/libnibble_megakernel.so; do
    for mode in nodes graphs; do
      [ "$(left)" -gt 60 ] || { echo "out of time"; break 3; }
      n=$(basename "${s%.*}")-$mode-r$round
      timeout 150 $B/bin/nibble grade --config full --seeds 0 -q --graph-records $mode --solution "$s" \
        --out "$OUT/grades/$n.json" > "$OUT/grades/$n.log" 2>&1
      echo "$n: exit $? $(grep -m2 -E 'disposition|time/token' "$OUT/grades/$n.log" | tr '\n' ' ')"
    done
  done
done
echo "graph-records.sh done in $(( $(date +%s) - t0 )) s"
