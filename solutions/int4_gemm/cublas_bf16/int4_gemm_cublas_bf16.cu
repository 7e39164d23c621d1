// int4_gemm_cublas_bf16.cu: gemm-w4a16-int4's comparison point (issue 24: "ratios against cuBLAS bf16
// per shape"), cuBLAS's bf16 tensor-core GEMM on W dequantised to bf16 once in prepare
// (solutions/common/cublas_bf16_gemm.h), built as libnibble_int4_gemm_cublas_bf16.so. Takes the plain
// layout. Not a candidate: it keeps a dequantised copy of W (2 N K bytes).
//
// prepare  Wb[n, k] = bf16((q - zero) * fp16 scale): the product is exact in fp32 (4 + 11 bits) and
//          rounded once to bf16 (8 bits): the oracle's bf16_dequant row, well inside the gate.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_bf16_gemm.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/int4_gemm/int4_layouts.cuh"

namespace nibble::int4_cublas_bf16 {
namespace {

__global__ void dequant_bf16_kernel(sol::Int4Problem g, uint16_t* __restrict__ Wb) {
  const int64_t total = g.N * g.K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    Wb[i] = f32_to_bf16(sol::int4_weight<NIBBLE_INT4_LAYOUT_PLAIN>(g, i / g.K, i % g.K));
}

struct Handle {
  sol::CublasBf16Gemm gemm;
};

std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  const sol::Int4Problem g = sol::parse_int4_problem(problem, NIBBLE_INT4_LAYOUT_PLAIN);
  h->gemm.init(g.M, g.N, g.K, 1.0f, stream);
  dequant_bf16_kernel<<<sol::grid_stride_blocks(g.N * g.K), sol::kGridStrideThreads, 0, stream>>>(g, h->gemm.Wb);
  SOL_CHECK_LAUNCH();
  SOL_CUDA(cudaStreamSynchronize(stream));
  return h;
}

void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) { h.gemm.run(A, C, stream); }

void teardown(Handle& h, cudaStream_t) { h.gemm.release(); }

}  // namespace
}  // namespace nibble::int4_cublas_bf16

NIBBLE_GEMM_SOLUTION("int4-cublas-bf16-predequantised", nibble::int4_cublas_bf16::prepare,
                     nibble::int4_cublas_bf16::run, nibble::int4_cublas_bf16::teardown);
