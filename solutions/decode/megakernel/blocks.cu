// blocks.cu: the decode kernel's GEMV and attention stages as kernels of their own, for the tests
// (odd shapes, few blocks) and the benchmark (bench/bench_megakernel_blocks.cu: each stage's TB/s
// in isolation, so a regression in one is visible on its own).
//
// Shapes: any the stages accept (megakernel.h). Bytes: gemv_blocks streams every matrix's codes and
// metadata once (for the benchmark: all 28 layers' projections, 1.57 GB); attention_blocks reads
// the cache slots 0..pos of one layer.
// The code is the decode kernel's own (int4_mma_gemv.cuh, attention.cuh), not a copy.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "activation.cuh"
#include "attention.cuh"
#include "stage_blocks.cuh"
#include "int4_mma_gemv.cuh"
#include "megakernel.h"

namespace nibble::megakernel {
namespace {

template <int kExp>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_blocks_kernel(const PackedMatrix* mats, const GemvPlan* plans, float* const* ys, int n, const float* x, int k) {
  extern __shared__ __align__(16) unsigned char smem[];
  gemv_blocks_body<kExp>(smem, mats, plans, ys, n, x, k);
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 1)
    attention_blocks_kernel(const float* qkv, const float2* rope, uint16_t* k_cache, uint16_t* v_cache, int n_q,
                            int n_kv, int max_seq, int pos, float* part, int max_chunks, unsigned* count, float* out) {
  extern __shared__ __align__(16) unsigned char smem[];  // one declaration per TU: as gemv_blocks_kernel's
  attention_blocks_body<HD>(smem, qkv, rope, k_cache, v_cache, n_q, n_kv, max_seq, pos, part, max_chunks, count, out);
}

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

}  // namespace

int gemv_blocks_grid(int blocks) { return blocks > 0 ? blocks : sm_count(); }

cudaError_t launch_gemv_blocks(const PackedMatrix* mats, const GemvPlan* plans, float* const* ys, int n, const float* x,
                               int k, int blocks, cudaStream_t stream, int exp) {
  if (!mats || !plans || !ys || n < 1 || n > kGemvBlocksMaxMats || !x || k <= 0 || k % kGroup != 0 || blocks < 0)
    return cudaErrorInvalidValue;
  blocks = gemv_blocks_grid(blocks);
  if (blocks < 1) return cudaErrorInvalidValue;
  const size_t smem = gemv_blocks_smem(k, n);
  const void* fn = exp == kGemvNoMath      ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvNoMath>)
                   : exp == kGemvLdsOnly   ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvLdsOnly>)
                   : exp == kGemvMathOnly  ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvMathOnly>)
                   : exp == kGemvFlushLast ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvFlushLast>)
                   : exp == kGemvNoRefill  ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvNoRefill>)
                   : exp == kGemvL2Ahead3  ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvL2Ahead3>)
                   : exp == kGemvL2Ahead6  ? reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvL2Ahead6>)
                                           : reinterpret_cast<const void*>(&gemv_blocks_kernel<kGemvReal>);
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  void* args[] = {&mats, &plans, &ys, &n, &x, &k};
  e = cudaLaunchKernel(fn, dim3(unsigned(blocks)), dim3(kThreads), args, smem, stream);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

cudaError_t launch_attention_blocks(const float* qkv, const float2* rope, uint16_t* k_cache, uint16_t* v_cache,
                                    int n_q, int n_kv, int hd, int max_seq, int pos, float* part, int max_chunks,
                                    unsigned* count, float* out, int blocks, cudaStream_t stream) {
  if (!qkv || !rope || !k_cache || !v_cache || !part || !count || !out || n_kv < 1 || n_q < n_kv ||
      n_q % n_kv != 0 || n_q / n_kv > kMaxRep || (hd != 64 && hd != 128) || pos < 0 || pos >= max_seq || blocks < 0)
    return cudaErrorInvalidValue;
  if (blocks == 0) blocks = sm_count();
  if (blocks < 1 || max_chunks != attn_max_chunks(blocks, n_kv)) return cudaErrorInvalidValue;
  if (hd == 64) {
    const size_t smem = attention_blocks_smem<64>();
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(&attention_blocks_kernel<64>),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    attention_blocks_kernel<64><<<unsigned(blocks), kThreads, smem, stream>>>(qkv, rope, k_cache, v_cache, n_q, n_kv,
                                                                               max_seq, pos, part, max_chunks, count, out);
  } else {
    const size_t smem = attention_blocks_smem<128>();
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(&attention_blocks_kernel<128>),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    attention_blocks_kernel<128><<<unsigned(blocks), kThreads, smem, stream>>>(
        qkv, rope, k_cache, v_cache, n_q, n_kv, max_seq, pos, part, max_chunks, count, out);
  }
  return cudaGetLastError();
}

}  // namespace nibble::megakernel
