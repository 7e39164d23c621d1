// int4_gemm_mma.cu: a tensor-core solution of gemm-w4a16-int4 for small M (M <= 16; larger M is
// declined, NOT_SUPPORTED), an ABI solution (include/nibble/nibble_gemm.h) built as
// libnibble_int4_gemm_mma.so, taking the plain layout. Runs on sm_80 and later (mma.sync bf16).
//
//   C (M, N) = A (M, K) W^T, W[n, k] = (q - zero) * fp16 scale per group of 128 along K
//
// prepare  repacks W on the host into MMA-fragment order (int4_mma_layout.h), uploads it (untimed).
// run      the FP4 GEMM's tuned small-M kernel with the int4 format of int4_mma_kernel.cuh (its
//          comment has the numerics); int4_gemm_sm90 runs the same at M <= 16.
// Bytes per call: W's codes N K / 2 + 4 bytes per (row, group) (6.25%) + A + C. Predicted (H200,
// not yet measured): the FP4 kernel's fraction of the weight-read floor (58-67% at M = 1, 42-55%
// at M = 16: solutions/gemm_fp4/sm90/NOTES.md), the decode costing one more HSUB2 per register
// and the per-chunk scaling 4 FMAs per n8 tile.
// Needs A 16-byte aligned (the kPerm order's activation loads; cudaMalloc'd A always is).
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/int4_gemm/mma/int4_mma_kernel.cuh"

namespace nibble::int4_mma {
namespace {

struct Handle {
  sol::Int4Problem g;
  MmaWeights w;
  sol::DeviceAllocs mem;
};

/** NOT_SUPPORTED for M > 16 or a device without bf16 mma.sync (compute capability < 8). */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_int4_problem(problem, NIBBLE_INT4_LAYOUT_PLAIN);
  if (h->g.M > 16)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "int4_gemm_mma is the small-M kernel: M <= 16, not " + std::to_string(h->g.M));
  int dev = 0, major = 0;
  SOL_CUDA(cudaGetDevice(&dev));
  SOL_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 8)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "int4_gemm_mma needs bf16 mma.sync (compute capability 8.0 or later)");
  h->w = upload_mma_weights(h->g, stream, h->mem);
  return h;
}

void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(h.g, A, C, &a, &c);
  launch_mma(h.w, a, c, h.g.M, h.g.N, h.g.K, stream);
}

void teardown(Handle& h, cudaStream_t) { h.mem.release(); }

}  // namespace
}  // namespace nibble::int4_mma

NIBBLE_GEMM_SOLUTION("int4-gemm-mma-small-m", nibble::int4_mma::prepare, nibble::int4_mma::run, nibble::int4_mma::teardown);
