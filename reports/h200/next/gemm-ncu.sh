#!/usr/bin/env bash
# gemm-ncu.sh: where the GEMMs' time goes where they lose to cuBLAS (issues 24 and 25), in one device
# call (~2-4 min), into $OUT: `nibble grade --profile ncu` of each case below with Nsight Compute's
# full section set (stall reasons, L2 and shared-memory throughput, pipe utilisation: the grader's own
# profile collects four metrics, fp4-m128.sh's 12.5% of DRAM peak said only "not memory"), each
# profile's details page printed as text (details/<case>.txt.gz: the .ncu-rep files are too large to
# bring back).
#   gemm_fp4_sm90 and cuBLAS bf16 at gemm-w4a16-nvfp4 m128-n3072-k3072 (0.90x on the H100) and m1 (the
#   1.25x-of-floor target); int4_gemm_sm90 and cuBLAS at gemm-w4a16-int4 m128-n1024-k3072 (0.82x).
#   CASES (task:config:library-name ..., space-separated) and TARGETS (what to build) replace them,
#   e.g. the dataflow megakernel: CASES="megakernel-int4-weight-decode:full:megakernel_dataflow"
#   TARGETS="nibble nibble_reference nibble_megakernel_dataflow".
# The full set goes to ncu through a wrapper first on PATH (the grader's --profile passes its own
# metrics; the wrapper adds --set full, or NCU_SET, to the profiling run, not to the export).
# Configure with NIBBLE_CMAKE_ARGS as ../sandbox-ledger/final.sh does; PREBUILT=1: no build,
# build-hopper/bin/nibble and build-hopper/lib carried from the CPU machine (LD_LIBRARY_PATH naming
# the carried libseccomp, as dataflow-ab.sh's PREBUILT). BUDGET: seconds it may take (default 560).
#   [PREBUILT=1] [BUDGET=s] [NCU_SET='--section ...'] bash reports/h200/next/gemm-ncu.sh <commit>
set -uo pipefail
export NIBBLE_SOURCE_COMMIT=${1:?commit}
t0=$(date +%s)
if [ "${PREBUILT:-0}" = 1 ]; then
  source scripts/env.sh
else
  source reports/h200/next/build.sh ${TARGETS:-nibble nibble_gemm_reference nibble_int4_gemm_reference nibble_gemm_fp4_sm90 \
    nibble_gemm_cublas_bf16 nibble_int4_gemm_sm90 nibble_int4_gemm_cublas_bf16}
fi
real=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
wrap=$(mktemp -d)
# NCU_SET: what the profiling run collects instead of the full set. The dataflow megakernel (2026-12-07,
# an H100) ended LaunchFailed under --set full at its first pass (its grade Passed): try the sections
# that need no instrumented replay first, e.g. NCU_SET="--section WarpStateStats --section
# SchedulerStats --section SpeedOfLight --section Occupancy --section LaunchStats".
ncu_set=${NCU_SET:---set full}
cat > "$wrap/ncu" <<EOF
#!/bin/sh
case "\$1" in --import) exec "$real" "\$@" ;; esac
exec "$real" $ncu_set "\$@"
EOF
chmod +x "$wrap/ncu"
mkdir -p "$OUT/details" "$OUT/profile"
cases=${CASES:-"gemm-w4a16-nvfp4:m128-n3072-k3072:gemm_fp4_sm90 gemm-w4a16-nvfp4:m128-n3072-k3072:gemm_cublas_bf16
gemm-w4a16-int4:m128-n1024-k3072:int4_gemm_sm90 gemm-w4a16-int4:m128-n1024-k3072:int4_gemm_cublas_bf16
gemm-w4a16-nvfp4:m1-n3072-k3072:gemm_fp4_sm90 gemm-w4a16-nvfp4:m1-n3072-k3072:gemm_cublas_bf16"}
for c in $cases; do
  IFS=: read -r task cfg sol <<<"$c"
  name=$task-$cfg-$sol
  left=$(( ${BUDGET:-560} - ($(date +%s) - t0) ))
  [ "$left" -gt 40 ] || { echo "$name: not run (time)"; continue; }
  PATH="$wrap:$PATH" timeout $(( left < 150 ? left : 150 )) build-hopper/bin/nibble grade --task "$task" --config "$cfg" \
    --seeds 0 -q --solution "build-hopper/lib/libnibble_$sol.so" --profile ncu --out "$OUT/profile/$name.json" \
    > "$OUT/profile/$name.log" 2>&1
  echo "$name: exit $? ($(( $(date +%s) - t0 )) s) $(grep -m1 -E 'disposition' "$OUT/profile/$name.log")"
  rep="$OUT/profile/$name.ncu-rep"
  [ -f "$rep" ] || { tail -5 "$OUT/profile/$name.log"; continue; }
  "$real" --import "$rep" --page details --print-details all --print-units base 2>&1 | gzip > "$OUT/details/$name.txt.gz"
  # The figures that say what a block waits on, for the log (the whole page is in details/).
  zcat "$OUT/details/$name.txt.gz" | grep -m60 -E 'Context [0-9]|^ +(Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued Instruction|Issue Slots Busy|Block Limit [A-Za-z]+) ' || true
  # What the warps stall on, per issued instruction (the raw page: "no_instruction" is the
  # instruction fetch, which a 146 KB kernel under a saturated weight stream may pay; NOTES.md).
  "$real" --import "$rep" --page raw --csv --print-units base 2>/dev/null | python3 reports/h200/next/ncu_stalls.py | head -8 || true
  rm -f "$rep"
done
tar cf "$OUT/gemm-ncu.tar" -C "$OUT" profile details && rm -rf "$OUT/profile" "$OUT/details"
echo "gemm-ncu.sh done in $(( $(date +%s) - t0 )) s"
