#!/usr/bin/env bash
# run_stream.sh: the device call for the stream kernel (solutions/gemm_fp4/sm90/NOTES.md, "v4 (stream
# kernel)"; now this experiment, libnibble_gemm_fp4_stream.so): the GPU test's stream cases (M 1 / 3
# / 16, N 3000 / 3072, K 3072 / 3080, forced splits and a wrapping ring) against the fp64 oracle,
# then nibble grade, both tasks, at six M <= 16 shapes of the stream kernel, of the shipped sm90
# solution (mma) and of cuBLAS bf16, plus the stream kernel forced to split 2 / 4 / 8 at two shapes:
# 48 grades of ~2.5 s and ~45 s of test, ~3 min.
#
#   experiments/gemm_fp4_stream/run_stream.sh BUILD_DIR [COMMIT]
# BUILD_DIR needs bin/, lib/ and tests/test_gemm_solutions_gpu (a build made on the CPU machine runs
# there unchanged). Output: $OUT/gputest.log, $OUT/reports.tar and the table on stdout (run_h200.sh).
set -u
B=${1:?build dir}
COMMIT=${2:-v4-stream}
HERE=$(cd "$(dirname "$0")/../../solutions/gemm_fp4/sm90" && pwd)  # run_h200.sh
RUNS=""
for task in gemm-w4a16-nvfp4 gemm-bf16-mxfp4; do
  for cfg in m1-n3072-k3072 m1-n8192-k3072 m16-n3072-k3072 m16-n3072-k8192 m16-n4096-k4096 m16-n3000-k3080; do
    RUNS="$RUNS $task:$cfg:fp4_stream $task:$cfg:fp4_sm90 $task:$cfg:cublas_bf16"
  done
  for cfg in m16-n3072-k3072 m1-n8192-k3072; do
    for s in 2 4 8; do RUNS="$RUNS $task:$cfg:fp4_stream:NIBBLE_FP4SM90_SPLIT=$s"; done
  done
done
exec "$HERE/run_h200.sh" "$B" "$COMMIT" "$RUNS" 'Stream/*'
