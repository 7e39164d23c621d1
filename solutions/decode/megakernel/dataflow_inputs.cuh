// dataflow_inputs.cuh: the input vector of each matrix segment of the dataflow megakernel (issue 21
// step 3; NOTES.md "v2"), built by the consumer warps from what the segment waited for, as XQuant
// limbs (int4_mma_gemv.cuh) of the CTA's groups [g0, g1) only. The math is v1's (activation.cuh,
// attention.cuh's combine_chunks), run on the consumer warps through the ConsumerThreads policy.
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

/** Shared memory of the input builds: xs (the longest input, fp32) and the sum's W floats, rounded
 *  up to 16 bytes (what follows stays aligned). */
NIBBLE_MK_HD inline size_t input_scratch_bytes(int max_k, int w) { return (size_t(max_k) * 4 + size_t(w) * 4 + 15) / 16 * 16; }

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

/** xq's groups [g0, g1) = limbs of silu(gate) * up, from gu (2 ffn, Interleave8) published by other
 *  CTAs; xs: ffn floats of shared memory (only [128 g0, 128 g1) written). As norm_input. */
template <int W>
__device__ __forceinline__ void swiglu_input(const float* gu, int ffn, int g0, int g1, float* xs, unsigned char* xq,
                                             uint32_t w) {
  using CT = ConsumerThreads<W>;
  load_swiglu<CT>(gu, g0, g1, xs);
  CT::sync();
  build_x_limbs_warps(int(w), W, xs, ffn, xq, nullptr, 1.f, g0, g1);
  CT::sync();
}

/** xq's groups [g0, g1) = limbs of the attention output (n_q hd), each element merged from the
 *  n_chunks partials of part (n_q, max_chunks, HD + 2) (combine_chunks) published by the attention
 *  items; xs: n_q HD floats of shared memory (only [128 g0, 128 g1) written). As norm_input. */
template <int HD, int W>
__device__ __forceinline__ void attn_input(const float* part, int max_chunks, int n_chunks, int n_q, int g0, int g1,
                                           float* xs, unsigned char* xq, uint32_t w) {
  using CT = ConsumerThreads<W>;
  for (int i = kGroup * g0 + int(CT::t()); i < kGroup * g1; i += int(CT::n()))
    xs[i] = combine_chunks<HD>(part, max_chunks, n_chunks, i / HD, i % HD);
  CT::sync();
  build_x_limbs_warps(int(w), W, xs, n_q * HD, xq, nullptr, 1.f, g0, g1);
  CT::sync();
}

}  // namespace nibble::megakernel::v2
