#!/usr/bin/env bash
# ab.sh: A/B of the megakernel's switches on the H200 (NOTES.md), each graded traced (full config,
# seed 0) in one call; usage: OUT=dir bash solutions/megakernel/ab.sh "NIBBLE_MK_GM=0" "NIBBLE_MK_GM=1"
B=build-hopper
for cfg in "$@"; do
  tag=$(echo "$cfg" | tr ' =' '_-')
  env $cfg NIBBLE_MK_TRACE="$OUT/trace-$tag.txt" timeout 100 $B/bin/nibble grade --config full --seeds 0 -q --solution $B/lib/libnibble_megakernel.so --out "$OUT/ab-$tag.json" --max-timing-seconds 3 > "$OUT/ab-$tag.log" 2>&1
  echo "== $cfg: $(grep -E 'time/token' $OUT/ab-$tag.log) $(grep -E 'disposition' $OUT/ab-$tag.log | cut -c1-60)"
  tail -8 "$OUT/trace-$tag.txt" | head -7
done
