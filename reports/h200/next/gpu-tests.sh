#!/usr/bin/env bash
# gpu-tests.sh: when a call cannot hold the whole test command (final.sh: ~575 s with its build),
# the GPU side of a harness change in one call: probe_cupti_launches, then the GPU tests named
# (default: the hostile suite and the graded runs, ~215 s on an H100), logs into $OUT.
#   TESTS='hostile_gpu|grade_gpu' bash reports/h200/next/gpu-tests.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
tests=${TESTS:-hostile_gpu|grade_gpu}
source reports/h200/next/build.sh nibble probe_cupti_launches test_grade_gpu test_hostile_gpu  # and what they depend on
B=build-hopper
timeout 60 $B/bin/probe_cupti_launches > "$OUT/probe-cupti-launches.log" 2>&1
echo "probe_cupti_launches exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "^-- 5|^== cuptiActivityEnable|^graph of|fatal signal" -A3 "$OUT/probe-cupti-launches.log" | cut -c1-240 | head -40
(cd $B && timeout $(( ${BUDGET:-560} - ($(date +%s) - t0) )) ctest -R "$tests" -j2 --output-on-failure) > "$OUT/ctest.log" 2>&1
echo "ctest exit $? ($(( $(date +%s) - t0 )) s)"
cp $B/Testing/Temporary/LastTest.log "$OUT/LastTest.log" 2>/dev/null
grep -E "Test +#|tests passed|MISSED|caught as expected|Failure|Which is|killed by signal" "$OUT/ctest.log" | cut -c1-300 | head -40
nvidia-smi -L
