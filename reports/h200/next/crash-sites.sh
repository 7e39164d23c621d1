#!/usr/bin/env bash
# crash-sites.sh: the short call (~3 min with its build) that places the SIGSEGV of 2026-12-07
# (graph-records.sh on an H100: probe_cupti_launches and the hostile row graph_trace_self both ended
# by it with GRAPH_TRACE on and the kernel records off), into $OUT:
#   1. probe_cupti_launches, line-buffered, its section 5's steps marked, its own crash frames;
#   2. the hostile rows control and graph_trace_self: the Crashed reason now names the crash's frame
#      (the child's frames, kCrashFramesMarker), the report's solution.log_tail keeps them all;
#   3. bad_segfault (raise(SIGSEGV) in decode_step) graded: still Crashed, the frame named.
#   bash reports/h200/next/crash-sites.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
# MIN=1 (a call with ~3 min left after its start): no test binary, the row graded as the test grades it.
# PREBUILT=1 with MIN=1: no build; carry build-hopper/bin/{nibble,probe_cupti_launches},
# lib/libnibble_reference.so and tests/lib/lib{hostile_control,hostile_graph_trace_self,
# hostile_whole_hide_in_tail_launch,hostile_whole_hide_in_sibling_launch,bad_segfault}.so (8 paths, ~16 MB).
if [ "${PREBUILT:-0}" = 1 ]; then source scripts/env.sh; else
source reports/h200/next/build.sh nibble nibble_reference probe_cupti_launches bad_segfault \
  $([ "${MIN:-0}" = 1 ] && echo hostile_graph_trace_self hostile_whole_hide_in_tail_launch hostile_whole_hide_in_sibling_launch \
    hostile_control || echo test_hostile_gpu)
fi
B=build-hopper
timeout 60 $B/bin/probe_cupti_launches > "$OUT/probe-cupti-launches.log" 2>&1
echo "probe_cupti_launches exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "^-- 5|^== cuptiActivityEnable|^graph of|fatal signal" -A3 "$OUT/probe-cupti-launches.log" | cut -c1-240 | head -40
if [ "${MIN:-0}" = 1 ]; then
  timeout 90 $B/bin/nibble grade --config tiny --seeds 0 --solution $B/tests/lib/libhostile_graph_trace_self.so \
    --out "$OUT/graph-trace-self.json" --timeout 300 --min-rounds 2 --max-rounds 2 > "$OUT/hostile-graph-trace-self.log" 2>&1
else
  (cd $B && NIBBLE_SOURCE_DIR=$OLDPWD NIBBLE_BINARY_DIR=$PWD timeout 120 tests/test_hostile_gpu \
    --gtest_filter='*/control:*/graph_trace_self') > "$OUT/hostile-graph-trace-self.log" 2>&1
fi
echo "hostile rows exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "disposition|Which is|caught as expected|MISSED" "$OUT/hostile-graph-trace-self.log" | cut -c1-400 | head -12
timeout 60 $B/bin/nibble grade --config tiny --seeds 0 --no-timing --solution $B/tests/lib/libbad_segfault.so \
  --out "$OUT/bad-segfault.json" > "$OUT/bad-segfault.log" 2>&1
echo "bad_segfault exit $?"; grep -E "disposition" "$OUT/bad-segfault.log" | cut -c1-400
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['solution'].get('log_tail','')[-1500:])" "$OUT/bad-segfault.json" 2>&1 | tail -20
# 4. The device-launched graphs under --graph-records graphs (rows whole_hide_in_{tail,sibling}_launch):
#    the control's busy time, then theirs (40 us more when the records hold the device graph).
if [ "${MIN:-0}" = 1 ]; then
  for row in control whole_hide_in_tail_launch whole_hide_in_sibling_launch; do
    timeout 90 $B/bin/nibble grade --config tiny --seeds 0 --graph-records graphs --solution $B/tests/lib/libhostile_$row.so \
      --out "$OUT/$row.json" --timeout 300 --min-rounds 2 --max-rounds 2 > "$OUT/$row.log" 2>&1
    echo "$row exit $?: $(grep -m1 disposition "$OUT/$row.log" | cut -c1-200)"
    python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['timing']; print('  busy/span us', t.get('busy_us', t.get('median_busy_us')), t.get('median_us'))" "$OUT/$row.json" 2>&1 | tail -1
  done
else
  (cd $B && NIBBLE_SOURCE_DIR=$OLDPWD NIBBLE_BINARY_DIR=$PWD timeout 120 tests/test_hostile_gpu \
    --gtest_filter='*/control:*/whole_hide_in_tail_launch:*/whole_hide_in_sibling_launch') > "$OUT/hostile-device-launch.log" 2>&1
  echo "device-launch rows exit $?"; grep -E "^\s+(control|whole_hide_\w+) |caught as expected|MISSED|Failure" "$OUT/hostile-device-launch.log" | head
fi
echo "crash-sites.sh done in $(( $(date +%s) - t0 )) s"
