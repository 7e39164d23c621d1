#!/usr/bin/env bash
# gemm-all.sh: grade every official shape of both FP4 GEMM tasks (issue 7: "Both tasks grade ... on
# the H200 with every shape") for the given bundled solutions, one JSON report each, bundled into
# $OUT/reports.tar, and a table of median us / TFLOP/s / TB/s / error (solutions/gemm_fp4/sm90/
# run_h200.sh does the grading). The shapes come from `nibble configs`, so the list is the harness's.
#   OUT=out scripts/gemm-all.sh [BUILD_DIR] [SOLUTION ...]     (default: build-hopper fp4_sm90 cublas_bf16)
# About 2-4 s per grade on the H200: 2 tasks x 29 configs x 2 solutions fit one 10-minute device call.
# The reports name NIBBLE_SOURCE_COMMIT when it is set (a copied tree's .git may be stale), else git's HEAD.
# CALIBRATE=1 instead runs `nibble calibrate --path gpu` per shape (SEEDS, default 0; about 7 reference
# runs of 1-2 s each per shape and seed), writing $OUT/calibration-<task>-<config>.json; FILTER (an
# extended regex on "task config") limits either mode to some shapes, e.g. FILTER='m4096|tiny'.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-hopper}
shift || true
SOLS=${*:-fp4_sm90 cublas_bf16}
# Every grade and calibration needs the GPU: say so once, not once per shape, and before asking
# for a build that could not help here.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "gemm-all.sh: no NVIDIA GPU here (nvidia-smi finds none); it grades on a GPU machine" >&2
  exit 2
fi
[ -x "$B/bin/nibble" ] || { echo "gemm-all.sh: $B/bin/nibble not found: build first (cmake --preset hopper && cmake --build --preset hopper), or name the build folder (scripts/gemm-all.sh build after scripts/test.sh)" >&2; exit 2; }
COMMIT=${NIBBLE_SOURCE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export NIBBLE_SOURCE_COMMIT=$COMMIT
OUT=${OUT:-out}
mkdir -p "$OUT"
all=$("$B/bin/nibble" configs | grep '^gemm-')
set +e
shapes=$(grep -E "${FILTER:-.}" <<<"$all")
frc=$?
set -e
[ $frc -le 1 ] || { echo "gemm-all.sh: FILTER='${FILTER:-}' is not a valid extended regular expression" >&2; exit 2; }
[ -n "$shapes" ] || { echo "gemm-all.sh: no GEMM config matches FILTER='${FILTER:-}'" >&2; exit 2; }
if [ "${CALIBRATE:-0}" = 1 ]; then
  status=0
  while read -r task cfg; do
    "$B/bin/nibble" calibrate --task "$task" --config "$cfg" --seeds "${SEEDS:-0}" --path gpu -q \
      --out "$OUT/calibration-$task-$cfg.json" | grep -E "gate health|calibrate" || status=1
  done <<<"$shapes"
  exit $status
fi
runs=""
while read -r task cfg; do
  for s in $SOLS; do runs="$runs $task:$cfg:$s"; done
done <<<"$shapes"
exec bash solutions/gemm_fp4/sm90/run_h200.sh "$B" "$COMMIT" "$runs" none
