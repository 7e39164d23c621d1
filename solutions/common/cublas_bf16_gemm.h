// cublas_bf16_gemm.h: the comparison point of every weight-only GEMM task: cuBLAS's bf16 tensor-core
// GEMM on weights dequantised to bf16 once in prepare (solutions/gemm_fp4/cublas_bf16,
// solutions/int4_gemm/cublas_bf16). Not a candidate: it keeps a dequantised copy of W, which the
// quantised kernels must not. Each task's solution writes its own dequantisation into `Wb`; the
// handle, the workspace and the GEMM are here.
//
// run: cublasGemmEx, A and W bf16, C fp32, CUBLAS_COMPUTE_32F (fp32 accumulation), default math
// mode: bf16 tensor cores. Bytes per call: 2 M K (A) + 2 N K (W) + 4 M N (C).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_check.h"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::sol {

/** cuBLAS, its 32 MiB workspace (so run allocates nothing) and the bf16 (N, K) weights. */
struct CublasBf16Gemm {
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  CublasHandle blas;
  uint16_t* Wb = nullptr;  // (N, K) bf16, row-major: the caller's dequantisation writes it
  void* workspace = nullptr;
  cudaStream_t bound = nullptr;  // the stream the handle and our workspace are set on
  DeviceAllocs mem;

  /** The handle on `stream`, the workspace and Wb allocated (not written). */
  void init(int64_t m, int64_t n, int64_t k, float a, cudaStream_t stream) {
    M = m;
    N = n;
    K = k;
    alpha = a;
    blas.create(stream);
    workspace = mem.alloc<void>(kWorkspaceBytes);
    SOL_CUBLAS(cublasSetWorkspace(blas.h, workspace, kWorkspaceBytes));
    bound = stream;
    Wb = mem.alloc<uint16_t>(size_t(N) * size_t(K) * sizeof(uint16_t));
  }

  /** C = alpha A Wb^T on `stream`; A and C checked (check_gemm_io). */
  void run(const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
    const uint16_t* a = nullptr;
    float* c = nullptr;
    check_gemm_io(M, N, K, A, C, &a, &c);
    // Row-major C (M, N) = A (M, K) W^T as column-major C^T (N, M) = op_T(W as (K, N), ld K) * (A as
    // (K, M), ld K).
    const float beta = 0.0f;
    // cublasSetStream resets the workspace to cuBLAS's default pool (cuBLAS docs, cublasSetStream):
    // set ours again, so run allocates nothing. Only when the stream changes: a timed call pays the
    // GEMM's host time alone (cuBLAS's calls spent 51-126 us of host time beyond their GPU span in
    // the graded reports, reports/h100/gemm-ab-386eb2a/).
    if (stream != bound) {
      SOL_CUBLAS(cublasSetStream(blas.h, stream));
      SOL_CUBLAS(cublasSetWorkspace(blas.h, workspace, kWorkspaceBytes));
      bound = stream;
    }
    SOL_CUBLAS(cublasGemmEx(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, Wb, CUDA_R_16BF, int(K), a,
                            CUDA_R_16BF, int(K), &beta, c, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  /** The cuBLAS handle, then the buffers (the workspace among them), checked (after the stream is
   *  drained). */
  void release() {
    blas.release();
    mem.release();
  }
};

}  // namespace nibble::sol
