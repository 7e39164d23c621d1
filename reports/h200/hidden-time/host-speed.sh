#!/usr/bin/env bash
# reports/h200/hidden-time/host-speed.sh: the hidden-time rule against the host's speed, in one call
# (~4-6 min on an H100 with a fresh build). Session 23's slower H100 (5.4 us per empty launch) put
# honest graph-launched solutions on `tiny` 3-26 us past the allowance (100 us + 10% of the span),
# where a 2.6 us host left them at 59-68 us. Here, on one machine: the host's launch cost (the probe),
# then each honest launch path on `tiny` by the span clock and by --clock wall, printing the span,
# window, credited overhead, hidden time and allowance of each, so the allowance's dependence on the
# host can be read off (and whether a host figure the child could measure before loading the
# solution would predict it). Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does.
#   bash reports/h200/hidden-time/host-speed.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 --target nibble hostile_graph hostile_control nibble_megakernel nibble_unfused \
  probe_cupti_launches > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"; nvidia-smi -L
timeout 40 build-hopper/bin/probe_cupti_launches > "$OUT/probe.log" 2>&1
grep -E "^host time" "$OUT/probe.log"
NIBBLE=build-hopper/bin/nibble
row() {  # row <name> <args...>: one grade, one line of its ledger figures
  local name=$1; shift
  timeout 120 "$NIBBLE" grade --config tiny --seeds 0 --min-rounds 2 --max-rounds 3 "$@" --out "$G/$name.json" > "$G/$name.log" 2>&1
  python3 - "$G/$name.json" "$name" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"{sys.argv[2]:34s} no report ({e})"); sys.exit()
t = r.get("timing") or {}; l = t.get("ledger") or {}
span = (t.get("gpu_span_us") or {}).get("median"); win = (l.get("window_us") or {}).get("median")
f = lambda v: "-" if v is None else f"{v:8.1f}"
print(f"{sys.argv[2]:34s} {r['disposition']:14s} span {f(span)} window {f(win)} overhead {f(l.get('overhead_credited_us'))}"
      f" hidden {f(l.get('hidden_us'))} allowed {f(l.get('hidden_allowance_us'))} kernels/call {f((t.get('kernels_per_call') or {}).get('median'))}")
PY
}
G=$OUT/grades; mkdir -p "$G"  # the device returns a few files: the grades go back as one archive
L=build-hopper/lib; H=build-hopper/tests/lib; D=solutions/decode/python
row megakernel --solution $L/libnibble_megakernel.so
row unfused --solution $L/libnibble_unfused.so
row hostile-control --solution $H/libhostile_control.so
row hostile-graph-graphs --solution $H/libhostile_graph.so --graph-records graphs
row hostile-graph-nodes --solution $H/libhostile_graph.so --graph-records nodes
for sol in triton_gemv_graph tinygemm_graph dense_bf16_graph; do
  row "$sol" --solution $D/$sol.py
  row "$sol-wall" --solution $D/$sol.py --clock wall
done
tar czf "$OUT/grades.tgz" -C "$OUT" grades && rm -rf "$G"
echo "host-speed.sh done in $(( $(date +%s) - t0 )) s"
