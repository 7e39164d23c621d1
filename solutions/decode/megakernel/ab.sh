#!/usr/bin/env bash
# ab.sh: A/B of the megakernel's env switches on the H200 (NOTES.md), each a full-config grade of
# seed 0 in one call, untraced (TRACE=1: traced too, the trace tables appended to $OUT/traces.txt;
# the trace's clocks and counters slow the step, so compare traced with traced only).
#   OUT=dir bash solutions/decode/megakernel/ab.sh "NIBBLE_MK_PFENCE=0" "NIBBLE_MK_PFENCE=1" ...
# An argument may set several switches: "NIBBLE_MK_PFENCE=0 NIBBLE_MK_FLUSH=0".
set -u
B=${B:-build-hopper}
[ $# -gt 0 ] || { echo "usage: OUT=dir bash solutions/decode/megakernel/ab.sh \"NIBBLE_MK_X=0\" \"NIBBLE_MK_X=1\" ..." >&2; exit 2; }
OUT=${OUT:-out-ab}
mkdir -p "$OUT" || exit 2
[ -x "$B/bin/nibble" ] || { echo "ab.sh: $B/bin/nibble not found: build first (cmake --preset hopper)" >&2; exit 2; }
failed=0
for cfg in "$@"; do
  tag=$(echo "$cfg" | tr ' :,=' '___-')  # names the device tool returns: no ':' or ','
  env $cfg timeout 100 $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/ab-$tag.json" --max-timing-seconds 3 > "$OUT/ab-$tag.log" 2>&1
  rc=$?
  echo "== $cfg: $(grep -E 'time/token' $OUT/ab-$tag.log | sed 's/ *time.token *//') $(grep -E 'disposition' $OUT/ab-$tag.log | cut -c1-40)"
  [ $rc -le 1 ] || { failed=$((failed + 1)); echo "   grade exit $rc: see $OUT/ab-$tag.log" >&2; }
  if [ "${TRACE:-0}" = 1 ]; then
    : > /dev/shm/nibble-ab-trace.tmp  # made here: the graded child writes a file under /dev, makes none
    env $cfg NIBBLE_MK_TRACE=/dev/shm/nibble-ab-trace.tmp timeout 100 $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/ab-$tag-traced.json" --max-timing-seconds 2 > /dev/null 2>&1
    { echo "== $cfg (traced)"; cat /dev/shm/nibble-ab-trace.tmp; } >> "$OUT/traces.txt"  # the sandbox writes only under /dev
    rm -f /dev/shm/nibble-ab-trace.tmp "$OUT/ab-$tag-traced.json"
  fi
done
[ "$failed" -eq 0 ] || exit 2
