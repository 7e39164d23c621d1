#!/usr/bin/env bash
# grade-default.sh: the main job. Build nibble, build the default fixtures (full config, seeds 0
# and 1; cached), grade the best bundled solution (the megakernel, sm_90a) on megakernel-int4-weight-decode, print the
# summary and write the report to reports/latest.json. Needs an NVIDIA GPU; says so and exits 2
# without one.
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
cmake --build --preset "$preset" -j "$NIBBLE_JOBS" --target nibble nibble_reference nibble_megakernel
case "$preset" in hopper) bindir=build-hopper ;; debug) bindir=build-debug ;; *) bindir=build ;; esac
exec "$bindir/bin/nibble" grade --task megakernel-int4-weight-decode --config "${NIBBLE_CONFIG:-full}" \
  --solution "$bindir/lib/libnibble_megakernel.so" --seeds 0,1 --out "${NIBBLE_REPORT:-reports/latest.json}" "$@"
