#!/usr/bin/env bash
# reports/h200/python/grade.sh: build nibble with the Python shims and grade every bundled Python
# solution on the H200 (issue 22): decode on tiny and full, the FP4 baseline on both GEMM tasks'
# tiny configs. Run from the repository root; logs and reports go to $OUT (default ./out-python).
#   OUT=/some/dir reports/h200/python/grade.sh
set -uo pipefail
OUT=${OUT:-$PWD/out-python}
mkdir -p "$OUT"
source scripts/env.sh
{
  echo "== environment"; date -u; nvidia-smi -L || true
  python3 -c 'import sys, torch, triton; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, torch.version.cuda, "triton", triton.__version__)' || true
  python3 -c 'import sysconfig, os; p = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print("Python.h:", p, os.path.exists(p)); print("LDLIBRARY:", sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY"))' || true
} > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

echo "== configure + build (log: $OUT/build.log)"
if ! { cmake --preset hopper && cmake --build build-hopper -j"$(nproc)" --target nibble test_python_shim test_sandbox test_cli; } > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 1
fi
grep -i "python shims\|Python3" "$OUT/build.log" | head -5
ls -l build-hopper/lib/libnibble_python_*.so || { echo "no Python shims: see $OUT/build.log"; exit 1; }

echo "== CPU tests of the shim and the sandbox (log: $OUT/ctest.log)"
(cd build-hopper && ctest -R 'python_shim|sandbox|cli' --output-on-failure) > "$OUT/ctest.log" 2>&1
tail -5 "$OUT/ctest.log"

NIBBLE=build-hopper/bin/nibble
grade() {  # grade <name> <args...>: report $OUT/<name>.json, log $OUT/<name>.log
  local name=$1; shift
  echo "== $name"
  "$NIBBLE" grade "$@" --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "exit $?"; tail -4 "$OUT/$name.log"
  [ -f "$OUT/$name.json" ] && python3 - "$OUT/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("solution", {})
print("  disposition:", r.get("disposition"), "|", r.get("reason", "")[:300])
print("  facts:", json.dumps(s.get("facts", {}))[:400])
t = r.get("timing") or {}
print("  us_per_call:", t.get("us_per_call"))
print("  seccomp:", [l.get("detail", "")[:160] for l in r.get("sandbox", {}).get("layers", r.get("sandbox", [])) if isinstance(l, dict) and l.get("name") == "seccomp"])
PY
}
D=solutions/decode/python
G=solutions/gemm_fp4/python/dequant_matmul.py
for sol in triton_gemv_graph tinygemm_graph dense_bf16_graph; do
  grade "decode-$sol-tiny" --config tiny --solution "$D/$sol.py"
done
for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
  grade "$task-dequant_matmul-tiny" --task "$task" --config tiny --solution "$G"
done
for sol in triton_gemv_graph tinygemm_graph dense_bf16_graph; do
  grade "decode-$sol-full" --config full --solution "$D/$sol.py"
done
echo "== done: reports and logs in $OUT"
