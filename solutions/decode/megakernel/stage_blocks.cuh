// stage_blocks.cuh: the decode kernel's GEMV and attention stages as kernel bodies of their own
// (gemv_blocks_kernel and attention_blocks_kernel in blocks.cu: the tests and the benchmark;
// tests/emulation runs the same bodies on the CPU). The code is the decode kernel's own
// (int4_mma_gemv.cuh, activation.cuh, attention.cuh), not a copy.
#pragma once

#include <cstddef>

#include "activation.cuh"
#include "attention.cuh"
#include "int4_mma_gemv.cuh"
#include "megakernel.h"

namespace nibble::megakernel {
namespace {

/** Shared memory of gemv_blocks_body: x, its limbs, the rings' mbarriers, the rings, the plans. */
inline size_t gemv_blocks_smem(int k, int n) {
  return size_t(k) * 8 + kRingBarrierBytes + kRingBytes + size_t(n) * kWarps * sizeof(GemvPlan);
}

/** One block of kThreads: ys[i] (rows_i) += W_i x for the n matrices (launch_gemv_blocks has the
 *  contract), with smem the block's gemv_blocks_smem(k, n) bytes of dynamic shared memory. */
template <int kExp>
__device__ __forceinline__ void gemv_blocks_body(unsigned char* smem, const PackedMatrix* mats, const GemvPlan* plans,
                                                 float* const* ys, int n, const float* x, int k) {
  float* xs = reinterpret_cast<float*>(smem);
  unsigned char* xf = smem + size_t(k) * 4;
  auto* bars = reinterpret_cast<unsigned long long*>(smem + size_t(k) * 8);
  Ring ring = ring_init(smem + size_t(k) * 8 + kRingBarrierBytes, bars);
  // This block's warps' plans of every matrix, copied once, as the decode kernel does its five.
  auto* plan = reinterpret_cast<GemvPlan*>(smem + size_t(k) * 8 + kRingBarrierBytes + kRingBytes);
  const int warp = threadIdx.x >> 5, nw = gridDim.x * kWarps;
  load_block_plans(plan, plans, n, nw);
  __syncthreads();
  ring_prefetch(mats[0], plan[warp], ring);
  load_vector(x, k, xs);
  __syncthreads();
  build_x_limbs(xs, k, xf);
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    const int in = i + 1 < n ? i + 1 : i;
    const PackedMatrix m = mats[i];
    const PackedMatrix next = mats[in];
    gemv_run<kExp>(m, plan[i * kWarps + warp], ys[i], xquant_view(xf, k), ring, next, plan[in * kWarps + warp], i + 1 < n);
    if (i + 1 < n) ring_prefetch(next, plan[in * kWarps + warp], ring);
  }
}

/** Shared memory of attention_blocks_body<HD>: the K/V sub-chunk, its mbarrier, the scratch. */
template <int HD>
size_t attention_blocks_smem() {
  return kAttnKvBytes + 16 + size_t(attention_smem_floats<HD>()) * 4;
}

/** One block of kThreads: the attention stage of one layer (launch_attention_blocks has the
 *  contract), with smem the block's attention_blocks_smem<HD>() bytes of dynamic shared memory. */
template <int HD>
__device__ __forceinline__ void attention_blocks_body(unsigned char* smem, const float* qkv, const float2* rope,
                                                      uint16_t* k_cache, uint16_t* v_cache, int n_q, int n_kv,
                                                      int max_seq, int pos, float* part, int max_chunks,
                                                      unsigned* count, float* out) {
  AttnKv kv = attn_kv_init(smem, reinterpret_cast<uint64_t*>(smem + kAttnKvBytes));
  attention_prefetch<HD>(kv, k_cache, v_cache, n_kv, max_seq, pos, max_chunks);  // as the decode kernel
  attention_stage<HD>(qkv, rope, k_cache, v_cache, n_q, n_kv, max_seq, pos, part, max_chunks, count, out,
                      reinterpret_cast<float*>(smem + kAttnKvBytes + 16), kv);
}

}  // namespace
}  // namespace nibble::megakernel
