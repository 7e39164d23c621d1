#!/usr/bin/env bash
# Issue 20 on the H200, one call (<= 590 s): the Landlock diagnosis and the README's test command
# whole (final.sh), then the calibration tables with the per-element guard (decode full, both GEMM
# tasks at m16-n3072-k3072), then every bundled solution graded with the sandbox and without it
# (NIBBLE_SANDBOX_DISABLE=namespaces,landlock,seccomp), in turn, on the same fixtures. Logs and
# reports into $OUT.
set -uo pipefail
commit=${1:?commit}
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
bash reports/h200/sandbox-ledger/final.sh "$commit" 400
export NIBBLE_SOURCE_COMMIT=$commit
n=build-hopper/bin/nibble
mkdir -p "$OUT/calibration" "$OUT/ab"
for tc in "megakernel-int4-weight-decode full" "gemm-w4a16-nvfp4 m16-n3072-k3072" "gemm-bf16-mxfp4 m16-n3072-k3072"; do
  set -- $tc
  [ "$(left)" -lt 60 ] && { echo "calibrate $1 $2: no time left"; continue; }
  timeout $(( $(left) - 40 )) $n calibrate --task "$1" --config "$2" --seeds 0,1 -q --out "$OUT/calibration/$1-$2.json" > "$OUT/calibration/$1-$2.log" 2>&1
  echo "calibrate $1 $2: exit $? ($(( $(date +%s) - t0 )) s)"; tail -n 25 "$OUT/calibration/$1-$2.log" | grep -iE "guard|sliver|healthy|gate" | head -8
done
grade() {  # task config solution tag
  [ "$(left)" -lt 25 ] && { echo "$4: no time left"; return; }
  timeout $(( $(left) - 10 )) $n grade --task "$1" --config "$2" --seeds 0 --solution "$3" -q --out "$OUT/ab/$4.json" > "$OUT/ab/$4.log" 2>&1
  python3 - "$OUT/ab/$4.json" "$4" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"{sys.argv[2]:52s} no report ({e})"); sys.exit()
t = r.get("timing", {})
sb = r.get("sandbox", {})
on = sum(l["state"] == "applied" for l in sb.get("layers", []))
print(f"{sys.argv[2]:52s} {r['disposition']:13s} {t.get('us_per_call', float('nan')):10.3f} us  layers {on}/{len(sb.get('layers', []))}")
PY
}
for round in 1 2; do
  for s in megakernel unfused; do
    grade megakernel-int4-weight-decode full build-hopper/lib/libnibble_$s.so "decode-full-$s-sandbox-r$round"
    NIBBLE_SANDBOX_DISABLE=namespaces,landlock,seccomp grade megakernel-int4-weight-decode full build-hopper/lib/libnibble_$s.so "decode-full-$s-nosandbox-r$round"
  done
  for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
    for s in gemm_fp4_sm90 gemm_cublas_bf16 gemm_baseline; do
      grade $task m16-n3072-k3072 build-hopper/lib/libnibble_$s.so "$task-m16-$s-sandbox-r$round"
      NIBBLE_SANDBOX_DISABLE=namespaces,landlock,seccomp grade $task m16-n3072-k3072 build-hopper/lib/libnibble_$s.so "$task-m16-$s-nosandbox-r$round"
    done
  done
done
echo "all.sh done in $(( $(date +%s) - t0 )) s"
