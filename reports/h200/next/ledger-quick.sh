#!/usr/bin/env bash
# The ledger's overhead with the reveal and the digest, in the least device time (~2 min after the
# machine starts): nibble, the references and three solutions built; decode tiny and full (the
# megakernel, last: its fixture is built first), a GEMM at M = 128 and 4096 graded; each report's timing.ledger printed, into $OUT.
#   bash reports/h200/next/ledger-quick.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 --target nibble nibble_reference nibble_unfused nibble_megakernel nibble_gemm_reference \
  nibble_gemm_fp4_sm90 > "$OUT/build.log" 2>&1 || { echo "build failed"; grep -m5 error "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
N=build-hopper/bin/nibble L=build-hopper/lib
grade() {  # name, then grade's arguments
  local name=$1; shift
  timeout 120 $N grade "$@" --out "$OUT/$name.json" -q > "$OUT/$name.log" 2>&1
  echo "$name: exit $? ($(( $(date +%s) - t0 )) s)"
  python3 - "$OUT/$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no report:", e); sys.exit()
t = r.get("timing") or {}
l = t.get("ledger") or {}
print("  %s: %s" % (r.get("disposition"), (r.get("reason") or "")[:300]))
print("  median span %.1f us, window median %.1f us, overhead %.1f (credited %.1f, cap %.1f), hidden %.1f of %.1f allowed, kept %d"
      % ((t.get("gpu_span_us") or {}).get("median", -1), (l.get("window_us") or {}).get("median", -1), l.get("overhead_us", -1),
         l.get("overhead_credited_us", -1), l.get("overhead_credit_cap_us", -1), l.get("hidden_us", -1),
         l.get("hidden_allowance_us", -1), len(l.get("kept", []))))
PY
}
grade decode-tiny-unfused --config tiny --solution $L/libnibble_unfused.so --max-rounds 3
grade nvfp4-m128-sm90 --task gemm-w4a16-nvfp4 --config m128-n4096-k4096 --solution $L/libnibble_gemm_fp4_sm90.so --max-rounds 3
grade nvfp4-m4096-sm90 --task gemm-w4a16-nvfp4 --config m4096-n4096-k4096 --solution $L/libnibble_gemm_fp4_sm90.so --max-rounds 3
grade decode-full-megakernel --config full --solution $L/libnibble_megakernel.so --max-rounds 3
nvidia-smi -L
