// gemm_cublas_bf16.cu: the comparison point of issue 7 ("graded in the same run as cuBLAS bf16 GEMM
// on pre-dequantised bf16 weights of the same shape"), an ABI solution (include/nibble/
// nibble_gemm.h) built as libnibble_gemm_cublas_bf16.so. Not a candidate: it keeps a dequantised
// copy of W, which the FP4 kernels must not.
//
//   gemm-w4a16-nvfp4  C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
//   gemm-bf16-mxfp4   C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
//
// prepare  dequantises W once into a bf16 (N, K) buffer (2 N K bytes: 50 MB at N = 8192,
//          K = 3072): e2m1 * block scale, which has at most 2 + 4 significant bits (or is a power
//          of two times e2m1) and so is exactly a bf16 value: the copy is exact. NVFP4's global
//          scale is left to the GEMM's alpha, as in the fp32 reference; folding it into W would
//          round every weight to bf16 (the oracle's bf16_dequant_fp32_acc row) for no gain in
//          speed.
// run      solutions/common/cublas_bf16_gemm.h: the bf16 weight stream the FP4 kernels are measured
//          against (4.5 bits per weight against 16).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_bf16_gemm.h"
#include "solutions/common/cublas_check.h"
#include "solutions/common/export.h"
#include "solutions/common/fp4_device.cuh"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::gemm_cublas_bf16 {
namespace {

/** Wb[n, k] = bf16(e2m1(code) * block scale), exact (see the header). */
__global__ void dequant_bf16_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scale, int64_t N,
                                    int64_t K, int64_t scale_cols, int block, bool nvfp4, uint16_t* __restrict__ Wb) {
  const int64_t total = N * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K, k = i % K;
    const uint32_t byte = packed[n * (K / 2) + k / 2];
    const uint32_t code = (k & 1) ? (byte >> 4) : (byte & 0xFu);
    const float s = sol::block_scale_to_f32(scale[n * scale_cols + k / block], nvfp4);
    Wb[i] = f32_to_bf16(sol::e2m1_to_f32(code) * s);
  }
}

struct Handle {
  sol::GemmProblem g;
  sol::CublasBf16Gemm gemm;  // alpha: NVFP4's global scale
};

std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_gemm_problem(problem);
  const sol::GemmProblem& g = h->g;
  h->gemm.init(g.M, g.N, g.K, g.nvfp4 ? g.global_scale : 1.0f, stream);
  dequant_bf16_kernel<<<sol::grid_stride_blocks(g.N * g.K), sol::kGridStrideThreads, 0, stream>>>(g.packed, g.scale, g.N, g.K, g.scale_cols, g.block, g.nvfp4,
                                                        h->gemm.Wb);
  SOL_CHECK_LAUNCH();
  SOL_CUDA(cudaStreamSynchronize(stream));
  return h;
}

void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) { h.gemm.run(A, C, stream); }

/** After the stream is drained (export.h): the cuBLAS handle and the bf16 weights, checked. */
void teardown(Handle& h, cudaStream_t) { h.gemm.release(); }

}  // namespace
}  // namespace nibble::gemm_cublas_bf16

NIBBLE_GEMM_SOLUTION("cublas-bf16-predequantised", nibble::gemm_cublas_bf16::prepare, nibble::gemm_cublas_bf16::run,
                     nibble::gemm_cublas_bf16::teardown);
