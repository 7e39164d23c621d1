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
//          speed. Also a 32 MiB cuBLAS workspace, so run allocates nothing.
// run      cublasGemmEx, A and W bf16, C fp32, CUBLAS_COMPUTE_32F (fp32 accumulation), default
//          math mode: bf16 tensor cores. Bytes per call: 2 M K (A) + 2 N K (W) + 4 M N (C), the
//          bf16 weight stream the FP4 kernels are measured against (4.5 bits per weight against 16).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_check.h"
#include "solutions/common/export.h"
#include "solutions/common/fp4_device.cuh"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::gemm_cublas_bf16 {
namespace {

constexpr int kThreads = 256;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

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
  float alpha = 1.0f;  // NVFP4: the global scale
  cublasHandle_t blas = nullptr;
  uint16_t* Wb = nullptr;  // (N, K) bf16
  sol::DeviceAllocs mem;

  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (blas) cublasDestroy(blas);
  }
  void release() {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (blas) st = cublasDestroy(blas);
    blas = nullptr;
    mem.release();
    SOL_CUBLAS(st);
  }
};

std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_gemm_problem(problem);
  const sol::GemmProblem& g = h->g;
  h->alpha = g.nvfp4 ? g.global_scale : 1.0f;
  SOL_CUBLAS(cublasCreate(&h->blas));
  SOL_CUBLAS(cublasSetStream(h->blas, stream));
  void* ws = h->mem.alloc<void>(kWorkspaceBytes);
  SOL_CUBLAS(cublasSetWorkspace(h->blas, ws, kWorkspaceBytes));
  h->Wb = h->mem.alloc<uint16_t>(size_t(g.N) * size_t(g.K) * sizeof(uint16_t));
  const int64_t total = g.N * g.K;
  const unsigned blocks = unsigned(std::min<int64_t>((total + kThreads - 1) / kThreads, 8192));
  dequant_bf16_kernel<<<blocks, kThreads, 0, stream>>>(g.packed, g.scale, g.N, g.K, g.scale_cols, g.block, g.nvfp4,
                                                        h->Wb);
  SOL_CHECK_LAUNCH();
  SOL_CUDA(cudaStreamSynchronize(stream));
  return h;
}

void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const sol::GemmProblem& g = h.g;
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(g, A, C, &a, &c);
  // Row-major C (M, N) = A (M, K) W^T as column-major C^T (N, M) = op_T(W as (K, N), ld K) * (A as
  // (K, M), ld K).
  const float beta = 0.0f;
  SOL_CUBLAS(cublasSetStream(h.blas, stream));
  SOL_CUBLAS(cublasGemmEx(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(g.N), int(g.M), int(g.K), &h.alpha, h.Wb,
                          CUDA_R_16BF, int(g.K), a, CUDA_R_16BF, int(g.K), &beta, c, CUDA_R_32F, int(g.N),
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/** After the stream is drained (export.h): the cuBLAS handle and the bf16 weights, checked. */
void teardown(Handle& h, cudaStream_t) { h.release(); }

}  // namespace
}  // namespace nibble::gemm_cublas_bf16

NIBBLE_GEMM_SOLUTION("cublas-bf16-predequantised", nibble::gemm_cublas_bf16::prepare, nibble::gemm_cublas_bf16::run,
                     nibble::gemm_cublas_bf16::teardown);
