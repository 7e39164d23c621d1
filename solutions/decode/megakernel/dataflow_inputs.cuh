// dataflow_inputs.cuh: the input vector of each matrix segment of the dataflow megakernel (issue 21
// step 3; NOTES.md "v2"), built by the consumer warps from what the segment waited for, as XQuant
// limbs (int4_mma_gemv.cuh) of the CTA's groups [g0, g1) only. The math is v1's (activation.cuh;
// the attention merge is combine_chunks' in two passes), run on the consumer warps through the
// ConsumerThreads policy.
//   qkv, gate|up, head: RMSNorm(h) * gain      (norm_input)
//   o:                  the attention output, merged from the chunks' partials (attn_input)
//   down:               silu(gate) * up          (swiglu_input)
#pragma once

#include <cstdint>

#include "activation.cuh"
#include "attention.cuh"
#include "int4_mma_gemv.cuh"
#include "segment_gemv.cuh"

namespace nibble::megakernel::v2 {

/** activation.cuh's thread policy for the consumer warps: warps 1..W of the block (warp 0 is the
 *  producer), synchronised by the consumers' named barrier. */
template <int W>
struct ConsumerThreads {
  static constexpr int kWarpCount = W;
  __device__ __forceinline__ static unsigned t() { return threadIdx.x - 32u; }
  __device__ __forceinline__ static unsigned n() { return 32u * W; }
  __device__ __forceinline__ static int warp() { return int(threadIdx.x >> 5) - 1; }
  __device__ __forceinline__ static void sync() { consumers_sync<W>(); }
};

/** Shared memory of the input builds: xs (the longest input, fp32), the sum's W floats and the
 *  attention merge's attn_weights floats (n_q x chunks: attn_input's wgt), rounded up to 16 bytes
 *  (what follows stays aligned). */
NIBBLE_MK_HD inline size_t input_scratch_bytes(int max_k, int w, int attn_weights) {
  return (size_t(max_k) * 4 + size_t(w) * 4 + size_t(attn_weights) * 4 + 15) / 16 * 16;
}

/** xq's groups [g0, g1) = limbs of RMSNorm(xs) * gain, xs (d floats of shared memory) loaded and
 *  the consumers synchronised before; gain (d) bf16, red: W floats. Consumer warp w, all lanes; ends
 *  with the consumers' barrier. */
template <int W>
__device__ __forceinline__ void norm_limbs(const float* xs, int d, const uint16_t* gain, float eps, int g0, int g1,
                                           float* red, unsigned char* xq, uint32_t w) {
  using CT = ConsumerThreads<W>;
  const float mul = rms_scale<CT>(xs, d, eps, red);
  build_x_limbs_warps(int(w), W, xs, d, xq, gain, mul, g0, g1);
  CT::sync();
}

/** xq's groups [g0, g1) = limbs of RMSNorm(h) * gain, h (d) fp32 published by other CTAs (read
 *  coherently), gain (d) bf16; xs: d floats of shared memory, red: W floats. Consumer warp w, all
 *  lanes; ends with the consumers' barrier. */
template <int W>
__device__ __forceinline__ void norm_input(const float* h, int d, const uint16_t* gain, float eps, int g0, int g1, float* xs,
                                           float* red, unsigned char* xq, uint32_t w) {
  load_vector<ConsumerThreads<W>>(h, d, xs);
  ConsumerThreads<W>::sync();
  norm_limbs<W>(xs, d, gain, eps, g0, g1, red, xq, w);
}

/** Layer 0's norm_input from the token's embedding row instead of h (load_embed_row), which also
 *  writes h_out[r0, r1) (the residual rows this CTA finishes: its own, read back by its o-proj). */
template <int W>
__device__ __forceinline__ void embed_norm_input(const SourceTriple& embed, int vocab, const int64_t* token, int d,
                                                 const uint16_t* gain, float eps, int g0, int g1, float* xs, float* red,
                                                 unsigned char* xq, float* h_out, int r0, int r1, uint32_t w) {
  using CT = ConsumerThreads<W>;
  load_embed_row<CT>(embed, vocab, d, token, xs, nullptr);
  CT::sync();
  for (int i = r0 + int(CT::t()); i < r1; i += int(CT::n())) h_out[i] = xs[i];
  norm_limbs<W>(xs, d, gain, eps, g0, g1, red, xq, w);
}

/** Outputs (float4s of silu(gate) * up) per consumer thread that swiglu_input loads at once: 3, so
 *  that the 15 consumer warps load a K half of the full config's down (1024 float4s) in one L2 round
 *  trip (v1's 2 took two: ~2.8 us of down's build a layer on an H100, NOTES.md "v2.6"). */
inline constexpr int kSwigluVecConsumers = 3;

/** xq's groups [g0, g1) = limbs of silu(gate) * up, from gu (2 ffn, Interleave8) published by other
 *  CTAs; xs: ffn floats of shared memory (only [128 g0, 128 g1) written). As norm_input. */
template <int W>
__device__ __forceinline__ void swiglu_input(const float* gu, int ffn, int g0, int g1, float* xs, unsigned char* xq,
                                             uint32_t w) {
  using CT = ConsumerThreads<W>;
  load_swiglu<CT, kSwigluVecConsumers>(gu, g0, g1, xs);
  CT::sync();
  build_x_limbs_warps(int(w), W, xs, ffn, xq, nullptr, 1.f, g0, g1);
  CT::sync();
}

/** Chunks whose o the attention merge loads at once per thread (one float4 each: 32 registers; 16
 *  spilled, the 15-warp kernel's stack 56 -> 264 bytes). */
inline constexpr int kMergeBatch = 8;

/**
 * xq's groups [g0, g1) = limbs of the attention output (n_q hd): element e of query head j is
 * sum_c o_c[e] w_c over the n_chunks partials of part (n_q, n_chunks, partial_floats(HD)) published
 * by the attention items, w_c = 2^(m_c - M) / sum_c' l_c' 2^(m_c' - M), M = max_c m_c (the online
 * softmax's merge, as v1's combine_chunks, in two passes). xs: n_q HD floats of shared memory (only
 * [128 g0, 128 g1) written); wgt: n_q n_chunks floats of shared memory (input_scratch_bytes'
 * attn_weights). Consumer warp w, all lanes; ends with the consumers' barrier, as norm_input.
 *
 * Why two passes: v1's merge (one element per thread, every chunk's m, l and o loaded together) made
 * a thread wait for ~4 L2 round trips in turn at the full config (1536 elements of a K half over 480
 * threads), ~6.6 us of o's 15 us a layer on an H100 (NOTES.md "v2.2"). Here each thread first issues
 * its float4 of o from the first kMergeBatch chunks, then the warps compute each head's weights from
 * its chunks' (m, l) (one load each) while those loads are in flight, and the o's are weighted after
 * the consumers' barrier, the next batches loaded as they go: at the full config (16 chunks, one
 * float4 a thread) two round trips instead of four. Sums in chunk order, max and sums across lanes
 * by a fixed butterfly: bitwise the same run to run.
 */
template <int HD, int W>
__device__ __forceinline__ void attn_input(const float* part, int n_chunks, int n_q, int g0, int g1, float* xs, float* wgt,
                                           unsigned char* xq, uint32_t w) {
  static_assert(kGroup % HD == 0, "a group holds whole heads, a float4 never two");
  using CT = ConsumerThreads<W>;
  constexpr int PF = partial_floats(HD);
  const int lane = int(threadIdx.x & 31);
  const int e0 = kGroup * g0, n4 = kGroup * (g1 - g0) / 4;  // this half's elements, as float4s
  const int j0 = e0 / HD, j1 = kGroup * g1 / HD;            // its query heads (HD divides 128)
  // The partial of head j, chunk c, its o from element e (16-byte aligned: PF and kPartialO are
  // multiples of 4 floats, part 16-byte aligned).
  const auto o4 = [&](int j, int c, int e) {
    return __ldcg(reinterpret_cast<const float4*>(part + (size_t(j) * n_chunks + c) * PF + kPartialO + e));
  };
  // 1. This thread's first float4: its first batch of o in flight.
  const int first = int(CT::t());
  float4 ob[kMergeBatch];
  if (first < n4) {
    const int el = e0 + 4 * first, j = el / HD, e = el % HD;
#pragma unroll
    for (int c = 0; c < kMergeBatch; ++c)
      if (c < n_chunks) ob[c] = o4(j, c, e);
  }
  // 2. Each head's weights, a warp per head: lanes over its chunks (m, l), the max and the sum over
  //    the warp by butterfly (every lane ends with the same M and L).
  //    A lane's first chunk's (m, l) is loaded once (one L2 round trip for the max and the sum);
  //    chunks past the warp's 32 lanes are loaded again for the sum.
  const auto ml_of = [&](int j, int c) {
    return __ldcg(reinterpret_cast<const float2*>(part + (size_t(j) * n_chunks + c) * PF));
  };
  for (int j = j0 + int(w); j < j1; j += W) {
    const float2 ml0 = lane < n_chunks ? ml_of(j, lane) : make_float2(-INFINITY, 0.f);
    float M = ml0.x;
    for (int c = lane + 32; c < n_chunks; c += 32) M = fmaxf(M, ml_of(j, c).x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, o));
    float L = 0.f;
    for (int c = lane; c < n_chunks; c += 32) {
      const float2 ml = c == lane ? ml0 : ml_of(j, c);
      const float f = ml.x == -INFINITY ? 0.f : exp2f(ml.x - M);
      wgt[(j - j0) * n_chunks + c] = f;
      L = fmaf(ml.y, f, L);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xFFFFFFFFu, L, o);
    const float inv = 1.f / L;
    for (int c = lane; c < n_chunks; c += 32) wgt[(j - j0) * n_chunks + c] *= inv;
  }
  CT::sync();
  // 3. o = sum_c o_c w_c, in chunk order: the first float4 from the batch in flight, the rest loaded
  //    batch by batch.
  for (int i = first; i < n4; i += int(CT::n())) {
    const int el = e0 + 4 * i, j = el / HD, e = el % HD;
    const float* wj = wgt + (j - j0) * n_chunks;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int c0 = 0; c0 < n_chunks; c0 += kMergeBatch) {
      if (i != first || c0 > 0) {
#pragma unroll
        for (int c = 0; c < kMergeBatch; ++c)
          if (c0 + c < n_chunks) ob[c] = o4(j, c0 + c, e);
      }
#pragma unroll
      for (int c = 0; c < kMergeBatch; ++c)
        if (c0 + c < n_chunks) {
          const float f = wj[c0 + c];
          acc = make_float4(fmaf(ob[c].x, f, acc.x), fmaf(ob[c].y, f, acc.y), fmaf(ob[c].z, f, acc.z), fmaf(ob[c].w, f, acc.w));
        }
    }
    *reinterpret_cast<float4*>(xs + el) = acc;
  }
  CT::sync();
  build_x_limbs_warps(int(w), W, xs, n_q * HD, xq, nullptr, 1.f, g0, g1);
  CT::sync();
}

}  // namespace nibble::megakernel::v2
