#!/usr/bin/env bash
# gpu-check.sh: one pass on a GPU machine for maintainers: build (hopper preset), run the GPU
# tests, build the full fixtures (timed), grade the bundled solutions on the full config.
# Logs and reports go to ${OUT:-out}/. Steps run on even when one fails; the exit status says
# whether any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${OUT:-out}
mkdir -p "$out"
status=0
step() { echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
step build
{ cmake --preset hopper -DNIBBLE_BUILD_BENCH="${NIBBLE_BUILD_BENCH:-OFF}" >/dev/null &&
  cmake --build --preset hopper -j "$NIBBLE_JOBS" 2>&1 | grep -E "error|warning" ; } || true
[ -x build-hopper/bin/nibble ] || { echo "build failed"; exit 1; }
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step "gpu tests"
  ctest --preset hopper -L "${TEST_LABEL:-gpu}" ${CTEST_ARGS:-} -j 1 --output-on-failure -V > "$out/ctest-gpu.log" 2>&1 || status=1
  grep -E "tests passed|Test +#|rel|error" "$out/ctest-gpu.log" | tail -40
fi
config=${NIBBLE_CONFIG:-full}
for seed in 0 1; do
  step "fixture $config seed $seed"
  /usr/bin/time -f "fixture build wall %e s, max RSS %M KB" build-hopper/bin/nibble fixture build \
    --config "$config" --seed $seed --quiet 2>&1 | tee -a "$out/fixtures.log" || status=1
done
for sol in ${SOLUTIONS:-unfused reference}; do
  step "grade $sol ($config)"
  build-hopper/bin/nibble grade --config "$config" --seeds 0,1 -q \
    --solution "build-hopper/lib/libnibble_${sol}.so" --out "$out/${sol}-${config}.json" || status=1
done
if [ "${CALIBRATE:-0}" = 1 ]; then
  step "calibrate ($config)"
  build-hopper/bin/nibble calibrate --config "$config" --seeds 0,1 -q --out "$out/calibration-${config}.json" || status=1
fi
exit $status
