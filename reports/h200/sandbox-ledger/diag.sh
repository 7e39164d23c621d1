#!/usr/bin/env bash
# Which sandbox layer the CUDA driver fails inside, on this machine: a tiny --no-timing grade of the
# reference with each layer left out in turn (NIBBLE_SANDBOX_DISABLE).
set -uo pipefail
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 --target nibble nibble_reference > "$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
for off in "" namespaces landlock seccomp landlock,seccomp namespaces,landlock namespaces,seccomp; do
  NIBBLE_SANDBOX_DISABLE=$off timeout 120 build-hopper/bin/nibble grade --config tiny --seeds 0 --no-timing \
    --solution build-hopper/lib/libnibble_reference.so --out "$OUT/ref-off-${off:-none}.json" > "$OUT/ref-off-${off:-none}.log" 2>&1
  echo "off=[$off] exit $?: $(grep -E 'disposition|usable|failed' "$OUT/ref-off-${off:-none}.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
done
python3 - "$OUT"/ref-off-none.json "$OUT"/ref-off-landlock.json "$OUT"/ref-off-seccomp.json <<'PY'
import json, sys
for p in sys.argv[1:]:
    try:
        r = json.load(open(p))
    except Exception as e:
        print(p, "no report"); continue
    print(p.split('/')[-1], [(l['name'], l['state']) for l in r.get('sandbox', {}).get('layers', [])])
PY
