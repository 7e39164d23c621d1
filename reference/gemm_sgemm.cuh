// gemm_sgemm.cuh: the fp32 cuBLAS GEMM both GEMM references run once their weights are dequantised
// exactly to fp32 (reference/gemm_fp4/gemm_reference_abi.cu, reference/int4_gemm/
// int4_gemm_reference_abi.cu): A bf16 -> fp32 (exact) into a scratch (M, K) buffer, then
// cublasSgemm (fp32 in, fp32 compute) under CUBLAS_PEDANTIC_MATH, so no TF32 or other
// reduced-precision algorithm can be chosen: C = alpha A W^T. The bf16-output and sliver variants
// are applied here too. Bytes per call: 2 M K (A) + 4 M K (scratch write) + 4 M K + 4 N K (GEMM reads) +
// 4 M N (C).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fixtures/bf16.h"
#include "reference/sliver.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_check.h"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::ref {

using sol::grid_stride_blocks;
using sol::kGridStrideThreads;

__global__ void sgemm_bf16_to_f32_kernel(const uint16_t* __restrict__ in, int64_t n, float* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = bf16_to_f32(in[i]);
}

__global__ void sgemm_round_bf16_kernel(float* __restrict__ x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = round_bf16(x[i]);
}

/** The reference's GEMM: its fp32 W (the caller dequantises into it), the A scratch and cuBLAS. */
struct SgemmReference {
  int64_t M = 0, N = 0, K = 0;
  sol::CublasHandle blas;
  float* W = nullptr;   // (N, K) fp32, row-major: the caller's dequantisation writes it
  float* Af = nullptr;  // (M, K) fp32 scratch
  sol::DeviceAllocs mem;

  /** cuBLAS on `stream` in pedantic math, W and the scratch allocated. */
  void init(int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    M = m;
    N = n;
    K = k;
    blas.create(stream, CUBLAS_PEDANTIC_MATH);
    W = mem.alloc<float>(size_t(N) * size_t(K) * sizeof(float));
    Af = mem.alloc<float>(size_t(M) * size_t(K) * sizeof(float));
  }

  /** C = alpha A W^T on `stream` (A and C checked); rounded to bf16 when `bf16_output` (the variant
   *  of a kernel that writes a bf16 C); the last sliver_columns(N) columns zeroed when `drop_sliver`
   *  (the sliver variant). */
  void run(const nibble_tensor* A, nibble_tensor* C, float alpha, bool bf16_output, bool drop_sliver, cudaStream_t stream) {
    const uint16_t* a = nullptr;
    float* c = nullptr;
    sol::check_gemm_io(M, N, K, A, C, &a, &c);
    sgemm_bf16_to_f32_kernel<<<grid_stride_blocks(M * K), kGridStrideThreads, 0, stream>>>(a, M * K, Af);
    SOL_CHECK_LAUNCH();
    // Row-major C (M, N) = A W^T is column-major C^T (N, M) = W A^T: W as column-major (K, N), ld K,
    // transposed; A as column-major (K, M), ld K.
    const float beta = 0.0f;  // C (NaN-filled by the harness) is not read
    SOL_CUBLAS(cublasSetStream(blas.h, stream));
    SOL_CUBLAS(cublasSgemm(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, W, int(K), Af, int(K), &beta,
                           c, int(N)));
    if (bf16_output) {
      sgemm_round_bf16_kernel<<<grid_stride_blocks(M * N), kGridStrideThreads, 0, stream>>>(c, M * N);
      SOL_CHECK_LAUNCH();
    }
    if (drop_sliver) {
      const int64_t n = sliver_columns(N);
      SOL_CUDA(cudaMemset2DAsync(c + (N - n), size_t(N) * 4, 0, size_t(n) * 4, size_t(M), stream));
    }
  }

  /** After the stream is drained: cuBLAS, then the buffers, checked. */
  void release() {
    blas.release();
    mem.release();
  }
};

}  // namespace nibble::ref
