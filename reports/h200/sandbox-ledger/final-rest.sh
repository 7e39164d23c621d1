#!/usr/bin/env bash
# The rest of the README's test command after final.sh was cut by its call's time: the next call,
# on the same warm machine, runs every test final.sh's run did not finish (its list in
# build-hopper/final-finished.txt), with the same preset and parallelism as scripts/test.sh.
#   bash reports/h200/sandbox-ledger/final-rest.sh <commit>   (the commit final.sh ran)
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
[ -f build-hopper/final-finished.txt ] || { echo "no build-hopper/final-finished.txt: run final.sh first, on this machine"; exit 2; }
source scripts/env.sh
finished=$(paste -sd'|' build-hopper/final-finished.txt)
cd build-hopper
timeout 570 ctest -j 16 --output-on-failure ${finished:+-E "^($finished)\$"} > "$OUT/test-rest.log" 2>&1
echo "ctest (the rest) rc=$?" >> "$OUT/test-rest.log"
cp Testing/Temporary/LastTest.log "$OUT/LastTest-rest.log" 2>/dev/null
nvidia-smi -L >> "$OUT/test-rest.log" 2>&1
grep -E "tests passed|Failed|\*\*\*|rc=" "$OUT/test-rest.log" | tail -15
