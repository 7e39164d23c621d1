#!/usr/bin/env bash
# run.sh: the one-pipeline change (issue 19) against the grader before it, in one call on one GPU:
# the megakernel's decode grade (full, seeds 0,1) and gemm_fp4_sm90 at M = 1 and M = 4096 (both FP4
# tasks), each graded by the old grader (2707c09, from old-src.tar.gz) and the new one, interleaved.
# Usage (repository root, on the GPU machine): bash reports/h200/one-pipeline/run.sh OUT_DIR NEW_COMMIT
set -uo pipefail
out=${1:?OUT_DIR}
new_commit=${2:?the commit of this tree}
old_commit=2707c09e2ea2ec72c39a1d779d2489b83008158c
mkdir -p "$out"
root=$(pwd)
bash scripts/setup.sh > "$out/setup.log" 2>&1
source scripts/env.sh
targets="nibble nibble_reference nibble_gemm_reference nibble_megakernel nibble_gemm_fp4_sm90"
build() {  # $1 = source dir, $2 = build dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > "$out/$(basename "$2")-cmake.log" 2>&1 &&
    cmake --build "$2" -j 16 --target $targets > "$out/$(basename "$2")-build.log" 2>&1
}
mkdir -p /tmp/old-src && tar xzf old-src.tar.gz -C /tmp/old-src
build /tmp/old-src /tmp/build-old & b1=$!
build "$root" /tmp/build-new & b2=$!
wait $b1; r1=$?; wait $b2; r2=$?
echo "build old rc=$r1 new rc=$r2" | tee "$out/builds.txt"
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$out/gpu.txt" 2>&1
export NIBBLE_CACHE_DIR=/tmp/nibble-cache
grade() {  # $1 = old|new, $2 = name, then grade arguments
  local v=$1 name=$2; shift 2
  local t0=$(date +%s.%N)
  NIBBLE_SOURCE_COMMIT=$([ "$v" = old ] && echo "$old_commit" || echo "$new_commit") \
    "/tmp/build-$v/bin/nibble" grade -q --out "$out/$v-$name.json" "$@" > "$out/$v-$name.log" 2>&1
  local rc=$?
  echo "$v $name rc=$rc $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/grades.txt"
}
for v in old new; do
  grade $v decode-megakernel --task megakernel-int4-weight-decode --config full --seeds 0,1 \
    --solution /tmp/build-$v/lib/libnibble_megakernel.so
done
for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
  for cfg in m1-n8192-k3072 m4096-n8192-k3072; do
    for v in old new; do
      grade $v "$task-$cfg" --task $task --config $cfg --seeds 0 --solution /tmp/build-$v/lib/libnibble_gemm_fp4_sm90.so
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.md"
import json, sys, os
out = sys.argv[1]
print("| grade | old disposition | old us (q1-q3) | new disposition | new us (q1-q3) | new/old |")
print("|---|---|---|---|---|---|")
names = sorted({f[4:-5] for f in os.listdir(out) if f.endswith(".json") and f[:4] in ("old-", "new-")})
for n in names:
    row = []
    meds = []
    for v in ("old", "new"):
        try:
            r = json.load(open(f"{out}/{v}-{n}.json"))
            s = r["timing"]["gpu_span_us"]
            row += [r["disposition"], f"{s['median']:.2f} ({s['q1']:.2f}-{s['q3']:.2f})"]
            meds.append(s["median"])
        except Exception as e:
            row += ["?", str(e)[:40]]
    ratio = f"{meds[1] / meds[0]:.3f}" if len(meds) == 2 else ""
    print(f"| {n} | " + " | ".join(row) + f" | {ratio} |")
PY
