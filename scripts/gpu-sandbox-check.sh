#!/usr/bin/env bash
# gpu-sandbox-check.sh: the sandbox (issue 20) on a GPU machine, from the repo root. Builds nibble,
# the references, the hostile .so's and the tests it runs; prints what each sandbox layer reported
# on this machine (a tiny grade of the reference, with and without --require-sandbox); then runs
# the sandbox, grade and hostile tests. Logs under $OUT (default ./sandbox-check). Exit: ctest's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/sandbox-check}
mkdir -p "$OUT"
source scripts/env.sh
{ uname -a; cat /proc/version; id; nvidia-smi -L 2>&1; sysctl kernel.unprivileged_userns_clone user.max_user_namespaces 2>&1;
  grep -i seccomp /proc/self/status; ls /sys/kernel/security/ 2>&1; cat /sys/kernel/security/lsm 2>&1; echo; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
cmake --preset hopper > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
grep -i "seccomp" "$OUT/configure.log"
cmake --build build-hopper -j16 --target nibble nibble_reference nibble_gemm_reference hostile_solutions \
  test_sandbox test_hostile_cpu test_hostile_gpu test_grade_gpu > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }

echo "== what the sandbox reports here (a tiny grade of the reference) =="
build-hopper/bin/nibble grade --config tiny --seeds 0 --no-timing --solution build-hopper/lib/libnibble_reference.so \
  --out "$OUT/reference-tiny.json" > "$OUT/grade-reference.log" 2>&1
echo "exit $? (0 expected)"; tail -15 "$OUT/grade-reference.log"
python3 - "$OUT/reference-tiny.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sb = r.get("sandbox", {})
print("complete:", sb.get("complete"), "| layers from:", sb.get("layers_from"))
for l in sb.get("layers", []):
    print(f"  {l['name']:18} {l['state']:14} {l['detail']}")
for k, v in sb.get("binaries", {}).items():
    print(f"  pinned {k:10} {v['sha256'][:16]}...  {v['path']}")
PY
echo "== --require-sandbox (0 where every layer holds, 2 with the gap named otherwise) =="
build-hopper/bin/nibble grade --config tiny --seeds 0 --no-timing --require-sandbox \
  --solution build-hopper/lib/libnibble_reference.so --out "$OUT/reference-tiny-required.json" > "$OUT/grade-required.log" 2>&1
echo "exit $?"; tail -5 "$OUT/grade-required.log"

echo "== tests =="
ctest --test-dir build-hopper -R 'hostile|grade_gpu|sandbox' --output-on-failure 2>&1 | tee "$OUT/ctest.log"
rc=${PIPESTATUS[0]}
grep -E "sandbox layer|hostile behaviours tried|expected .* got" "$OUT/ctest.log" | sort -u
exit "$rc"
