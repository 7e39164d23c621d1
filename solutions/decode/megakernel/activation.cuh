// activation.cuh: the input vector of each GEMV stage, built by every block in its shared memory.
//
// Spec (nibble.h, the seed): h = dequant(embed)[token]; a = RMSNorm(h) * gain with
// RMSNorm(x) = x / sqrt(mean(x^2) + eps), fp32 sums; m = silu(gate a) * up a, silu(x) = x/(1+e^-x).
// Shapes: h (d) fp32, gains (d) bf16 (copied to shared memory a stage early), gate|up (2 ffn) fp32 in Interleave8 order (megakernel.h).
// Bytes: each block reads the vector from L2 (12 KB for h, 64 KB for gate|up in the full config)
// and the gain (6 KB): recomputing the norm in every block costs ~1.6 MB of L2 reads per norm,
// where a separate norm stage would cost a grid barrier (~1 us).
// Everything written earlier in this kernel by other blocks is read with ld.global.cg (L2, coherent):
// the non-coherent read-only path (__ldg) may serve stale lines for data written during the kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "megakernel.h"
#include "solutions/common/sm90_async.cuh"

namespace nibble::megakernel {

__device__ __forceinline__ float bf16_bits_to_float(uint32_t b) { return __uint_as_float(b << 16); }

/** The threads a block-wide loop or sum runs on: the whole block (v1's stages), or the dataflow
 *  kernel's consumer warps (v2::ConsumerThreads). A policy read where the code reads it, so that
 *  v1's code is the same instructions as before it was parameterised (checked on the SASS). */
struct BlockThreads {
  static constexpr int kWarpCount = kWarps;
  __device__ __forceinline__ static unsigned t() { return threadIdx.x; }
  __device__ __forceinline__ static unsigned n() { return blockDim.x; }
  __device__ __forceinline__ static int warp() { return int(threadIdx.x >> 5); }
  __device__ __forceinline__ static void sync() { __syncthreads(); }
};

/** Sum of v over the threads of Threads (every one gets it). red: Threads::kWarpCount floats of
 *  shared memory. */
template <class Threads = BlockThreads>
__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  const int warp = Threads::warp(), lane = threadIdx.x & 31;
  Threads::sync();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  Threads::sync();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < Threads::kWarpCount; ++w) t += red[w];
  return t;
}

/** xs (d) = dequant(embed)[token]; NaN for a token outside [0, vocab) (the step then fails the gate
 *  visibly instead of reading out of bounds). When h_out is set, also written there. By the
 *  threads of Threads. */
template <class Threads = BlockThreads>
__device__ __forceinline__ void load_embed_row(const SourceTriple& e, int vocab, int d, const int64_t* token,
                                               float* xs, float* h_out) {
  const int64_t t = __ldg(token);
  const bool valid = t >= 0 && t < vocab;
  const int groups = d / kGroup;
  for (int i = Threads::t(); i < d; i += Threads::n()) {
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

/** float4s per thread issued together by the vector loaders: every load of a thread in flight at
 *  once (one L2 round trip per 2 x 512 float4, where a plain strided loop waits once per element
 *  round: v2's down stage spent ~6 us loading gate|up that way). More spills the decode kernel at
 *  its 128-register cap (ptxas: 8 -> 850 bytes of spills). */
constexpr int kVecPerThread = 2;
constexpr int kSwigluVec = 2;  // output float4s per thread in flight in load_swiglu (8 loads)

/** xs (n) = src (n), n a multiple of 4, src 16-byte aligned; coherent loads (L2); by the threads of
 *  Threads. */
template <class Threads = BlockThreads>
__device__ __forceinline__ void load_vector(const float* src, int n, float* xs) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  float4* x4 = reinterpret_cast<float4*>(xs);
  const int n4 = n / 4;
  for (int base = Threads::t(); base < n4; base += Threads::n() * kVecPerThread) {
    float4 v[kVecPerThread];
#pragma unroll
    for (int k = 0; k < kVecPerThread; ++k) {
      const int i = base + k * Threads::n();
      if (i < n4) v[k] = __ldcg(s4 + i);
    }
#pragma unroll
    for (int k = 0; k < kVecPerThread; ++k) {
      const int i = base + k * Threads::n();
      if (i < n4) x4[i] = v[k];
    }
  }
}

/** Start copying gain (d bf16, 16-byte aligned, d a multiple of 8) into gn (shared memory) with
 *  cp.async: the copy holds no registers, so it is issued a stage early and waited for
 *  (gain_wait) before the barrier that precedes its use, off the critical path. */
__device__ __forceinline__ void gain_prefetch(const uint16_t* gain, int d, uint16_t* gn) {
  // Not from lane 0 of a warp: it issues the weight ring's bulk copies, and their proxy fence would
  // wait for these copies to land.
  const int lane = threadIdx.x & 31;
  if (lane == 0) return;
  const int n = (blockDim.x >> 5) * 31;
  for (int i = (threadIdx.x >> 5) * 31 + lane - 1; i < d / 8; i += n) sol::cp_async_16(gn + 8 * i, gain + 8 * i);
  sol::cp_async_commit();
}

/** This thread's gain_prefetch copies have landed (a __syncthreads then makes them the block's). */
__device__ __forceinline__ void gain_wait() { sol::cp_async_wait_all(); }

/** 1 / sqrt(mean(xs^2) + eps) over d (fp32 sum, the reciprocal root in fp64 as the reference);
 *  RMSNorm(x) * gain is then applied as build_x_limbs reads x. By the threads of Threads; the caller
 *  synchronises them before. */
template <class Threads = BlockThreads>
__device__ __forceinline__ float rms_scale(const float* xs, int d, float eps, float* red) {
  float ss = 0.f;
  for (int i = Threads::t(); i < d; i += Threads::n()) ss = fmaf(xs[i], xs[i], ss);
  ss = block_sum<Threads>(ss, red);
  return float(1.0 / sqrt(double(ss) / double(d) + double(eps)));
}

/** xs[128 g0 .. 128 g1) = silu(gate) * up for the down-proj input groups [g0, g1), from gu in
 *  Interleave8 order (tile t: gate rows 8t..8t+7, then up rows 8t..8t+7), silu(x) = x / (1 + e^-x);
 *  2 float4 loads per 4 outputs, V outputs per thread issued together. A block reads only the groups
 *  its units need (down's units come in chunks of 4 groups: a chunk or two, 2-4 KB, instead of all 64
 *  KB of gate|up). By the threads of Threads. */
template <class Threads = BlockThreads, int V = kSwigluVec>
__device__ __forceinline__ void load_swiglu(const float* gu, int g0, int g1, float* xs) {
  const float4* g4 = reinterpret_cast<const float4*>(gu);
  float4* x4 = reinterpret_cast<float4*>(xs);
  const int q0 = g0 * (kGroup / 4), q1 = g1 * (kGroup / 4);  // output float4s; q covers rows 4q..4q+3
  for (int base = q0 + int(Threads::t()); base < q1; base += Threads::n() * V) {
    float4 g[V] = {}, u[V] = {};  // zero: gcc cannot see that q < q1 guards both loops alike
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int q = base + k * Threads::n();
      if (q < q1) {
        const int src = 4 * (q >> 1) + (q & 1);  // float4 index of the gate half; up is 2 further
        g[k] = __ldcg(g4 + src);
        u[k] = __ldcg(g4 + src + 2);
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int q = base + k * Threads::n();
      if (q < q1)
        x4[q] = make_float4(g[k].x / (1.0f + expf(-g[k].x)) * u[k].x, g[k].y / (1.0f + expf(-g[k].y)) * u[k].y,
                            g[k].z / (1.0f + expf(-g[k].z)) * u[k].z, g[k].w / (1.0f + expf(-g[k].w)) * u[k].w);
    }
  }
}

}  // namespace nibble::megakernel
