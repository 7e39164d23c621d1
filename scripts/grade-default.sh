#!/usr/bin/env bash
# grade-default.sh: the main job. Build nibble, build the default fixtures (full config, seeds 0
# and 1; cached), grade the best bundled solution (the megakernel, sm_90a) on
# megakernel-int4-weight-decode and, in the same run on the same fixtures, the PyTorch anchors
# (torch's int4 tinygemm and dense bf16, each in a CUDA graph: solutions/decode/python/) where
# torch is importable; print the side by side and write the reports, lineup.{txt,json} and the page
# lineup.html (the megakernel's, the anchors' bars beside it, from their own reports) into
# reports/latest/. The exit status is the megakernel's grade (an anchor that does not pass is a row
# of the table, said below it). Needs an NVIDIA GPU; says so and exits 2 without one.
set -euo pipefail
cd "$(dirname "$0")/.."
# No NVIDIA driver at all: say so before minutes of building (nibble's own probe, after the build,
# names any other reason a GPU cannot be used).
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "grade-default.sh: no NVIDIA GPU here (nvidia-smi finds none), so nothing can be graded; run it on a machine" \
       "with an NVIDIA GPU (the megakernel needs sm_90, e.g. an H100 or H200). scripts/test.sh runs the CPU tests." >&2
  exit 2
fi
bash scripts/setup.sh
source scripts/env.sh
preset=${NIBBLE_PRESET:-release}
cmake --preset "$preset" >/dev/null
targets=(nibble nibble_reference nibble_megakernel)
case "$preset" in hopper) bindir=build-hopper ;; debug) bindir=build-debug ;; *) bindir=build ;; esac
solutions=(--solution "$bindir/lib/libnibble_megakernel.so")
# The anchors: only where the interpreter nibble embeds has torch (the Python shim says which one).
if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  targets+=(nibble_python_decode)
  solutions+=(--solution solutions/decode/python/tinygemm_graph.py --solution solutions/decode/python/dense_bf16_graph.py)
else
  echo "grade-default.sh: python3 has no torch with CUDA here: the PyTorch anchors are left out (pip install torch to grade them)" >&2
fi
cmake --build --preset "$preset" -j "$NIBBLE_JOBS" --target "${targets[@]}"
out=${NIBBLE_REPORTS:-reports/latest}
rc=0
if [ ${#solutions[@]} -eq 2 ]; then  # the megakernel alone: its report in the folder, its own exit status
  mkdir -p "$out"
  exec "$bindir/bin/nibble" grade --task megakernel-int4-weight-decode --config "${NIBBLE_CONFIG:-full}" "${solutions[@]}" \
    --seeds 0,1 --out "$out/libnibble_megakernel.json" "$@"
fi
"$bindir/bin/nibble" grade --task megakernel-int4-weight-decode --config "${NIBBLE_CONFIG:-full}" "${solutions[@]}" \
  --seeds 0,1 --out "$out" "$@" || rc=$?
mk=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["rows"][0]["disposition"])' "$out/lineup.json" 2>/dev/null || echo "")
if [ "$mk" = "Passed" ]; then
  [ $rc -ne 0 ] && echo "grade-default.sh: the megakernel passed; an anchor did not (exit $rc): see $out/lineup.txt" >&2
  exit 0
fi
exit $(( rc == 0 ? 1 : rc ))
