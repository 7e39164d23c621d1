#!/usr/bin/env bash
# Issue 20 on the H200, one call: configure (libseccomp from a carried Debian package when the
# machine lacks it: NIBBLE_CMAKE_ARGS), build everything, report what each sandbox layer did on this
# machine (a tiny grade of the reference), then the whole CTest suite. Logs into $OUT.
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
source scripts/env.sh
start=$(date +%s)
{ uname -a; id; nvidia-smi -L; ls /usr/include/seccomp.h 2>&1; cat /sys/kernel/security/lsm 2>&1; echo; } > "$OUT/machine.txt" 2>&1
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
grep -i "seccomp" "$OUT/configure.log"
cmake --build build-hopper -j16 -- -k > "$OUT/build-full.log" 2>&1
grep -E "error|Error " "$OUT/build-full.log" | head -30 > "$OUT/build.log"
echo "build done in $(( $(date +%s) - start )) s, $(wc -l < "$OUT/build.log") error lines" | tee -a "$OUT/build.log"
head -20 "$OUT/build.log"
build-hopper/bin/nibble grade --config tiny --seeds 0 --no-timing --solution build-hopper/lib/libnibble_reference.so \
  --out "$OUT/reference-tiny.json" > "$OUT/grade-reference.log" 2>&1
echo "reference grade exit $?"; tail -8 "$OUT/grade-reference.log"
python3 - "$OUT/reference-tiny.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no report:", e); sys.exit(0)
sb = r.get("sandbox", {})
print("sandbox complete:", sb.get("complete"), "| layers from:", sb.get("layers_from"))
for l in sb.get("layers", []):
    print(f"  {l['name']:18} {l['state']:14} {l['detail'][:150]}")
PY
cd build-hopper
timeout ${2:-420} ctest -j16 --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest rc=$? at $(( $(date +%s) - start )) s" >> "$OUT/ctest.log"
cp Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
grep -E "tests passed|Failed|ctest rc|\*\*\*" "$OUT/ctest.log" | tail -20
grep -E "hostile behaviours tried|expected .* got .* (MISSED|SKIP)" "$OUT/LastTest.log" | sort -u | head -20
