#!/usr/bin/env bash
# pc-stalls.sh: issue 21's open measurement, one device call (~3 min), into $OUT: where the dataflow
# megakernel's warps stall, by CUPTI PC sampling (bench/probe_pc_stalls.cpp: continuous mode, no
# replay; Nsight Compute reads this kernel as a grid of 0 with every metric nan), beside v1 (the
# megakernel, which ncu does read: 13.3 cycles per issued instruction, barrier 3.6, long scoreboard
# 2.2, wait 2.0, no_instruction 1.85; reports/h100/session22-da3d507/) as the cross-check that the
# sampler's reasons agree with ncu's on a kernel both can see. The SASS of both libraries goes with
# it (gzipped), so that each listed PC offset can be read.
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/next/pc-stalls.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source reports/h200/next/build.sh probe_pc_stalls nibble_megakernel nibble_megakernel_dataflow
B=build-hopper
for sol in megakernel_dataflow megakernel; do
  timeout 240 $B/bin/probe_pc_stalls --solution $sol --steps 20 --top 40 --csv "$OUT/pc-$sol.csv" > "$OUT/pc-stalls-$sol.txt" 2>&1
  echo "probe_pc_stalls $sol: exit $? ($(( $(date +%s) - t0 )) s)"; head -40 "$OUT/pc-stalls-$sol.txt"
  gzip -f "$OUT/pc-$sol.csv"
  cuobjdump -sass $B/lib/libnibble_$sol.so 2>/dev/null | gzip > "$OUT/sass-$sol.txt.gz"
done
echo "pc-stalls.sh done in $(( $(date +%s) - t0 )) s"
