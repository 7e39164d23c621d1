// activation.cuh: the input vector of each GEMV stage, built by every block in its shared memory.
//
// Spec (nibble.h, the seed): h = dequant(embed)[token]; a = RMSNorm(h) * gain with
// RMSNorm(x) = x / sqrt(mean(x^2) + eps), fp32 sums; m = silu(gate a) * up a, silu(x) = x/(1+e^-x).
// Shapes: h (d) fp32, gains (d) bf16, gate|up (2 ffn) fp32 in Interleave8 order (megakernel.h).
// Bytes: each block reads the vector from L2 (12 KB for h, 64 KB for gate|up in the full config)
// and the gain (6 KB): recomputing the norm in every block costs ~1.6 MB of L2 reads per norm,
// where a separate norm stage would cost a grid barrier (~1 us).
// Everything written earlier in this kernel by other blocks is read with ld.global.cg (L2, coherent):
// the non-coherent read-only path (__ldg) may serve stale lines for data written during the kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "megakernel.h"

namespace nibble::megakernel {

__device__ __forceinline__ float bf16_bits_to_float(uint32_t b) { return __uint_as_float(b << 16); }

/** Sum of v over the block (every thread gets it). red: kWarps floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  return t;
}

/** xs (d) = dequant(embed)[token]; NaN for a token outside [0, vocab) (the step then fails the gate
 *  visibly instead of reading out of bounds). When h_out is set, also written there. */
__device__ __forceinline__ void load_embed_row(const SourceTriple& e, int vocab, int d, const int64_t* token,
                                               float* xs, float* h_out) {
  const int64_t t = __ldg(token);
  const bool valid = t >= 0 && t < vocab;
  const int groups = d / kGroup;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = NAN;
    if (valid) {
      const uint32_t byte = __ldg(e.packed + size_t(t) * (d / 2) + i / 2);
      const int code = (i & 1) ? int(byte >> 4) : int(byte & 0xFu);  // LOW nibble = even index
      const int g = i / kGroup;
      const float s = bf16_bits_to_float(__ldg(e.scale + size_t(t) * groups + g));
      v = float(code - int(__ldg(e.zero + size_t(t) * groups + g))) * s;  // exact
    }
    xs[i] = v;
    if (h_out) h_out[i] = v;
  }
}

/** xs (n) = src (n), coherent loads. */
__device__ __forceinline__ void load_vector(const float* src, int n, float* xs) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = __ldcg(src + i);
}

/** xs = xs / sqrt(mean(xs^2) + eps) * gain, in place; the reciprocal root in fp64 as the reference. */
__device__ __forceinline__ void rmsnorm_inplace(float* xs, const uint16_t* gain, int d, float eps, float* red) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xs[i], xs[i], ss);
  ss = block_sum(ss, red);
  const float rinv = float(1.0 / sqrt(double(ss) / double(d) + double(eps)));
  for (int i = threadIdx.x; i < d; i += blockDim.x) xs[i] = xs[i] * rinv * bf16_bits_to_float(__ldg(gain + i));
}

/** xs (ffn) = silu(gate) * up from gu in Interleave8 order: gate row r at 16 (r/8) + r%8, up row r
 *  8 further. */
__device__ __forceinline__ void load_swiglu(const float* gu, int ffn, float* xs) {
  for (int r = threadIdx.x; r < ffn; r += blockDim.x) {
    const int base = 16 * (r >> 3) + (r & 7);
    const float g = __ldcg(gu + base), u = __ldcg(gu + base + 8);
    xs[r] = g / (1.0f + expf(-g)) * u;
  }
}

}  // namespace nibble::megakernel
