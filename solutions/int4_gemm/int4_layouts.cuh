// int4_layouts.cuh: W[n, k] of gemm-w4a16-int4 read straight from each checkpoint layout
// (include/nibble/nibble_gemm.h, "gemm-w4a16-int4"), for the solutions of the family. One place
// that knows where each layout keeps a code, a zero point and a scale; a kernel picks its layout as
// a template argument (the one its nibble_gemm_int4_layout returns). Host and device code: a CPU test
// (tests/int4_gemm/test_int4_layouts_decode.cu) reads every layout through these functions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "nibble/nibble_gemm.h"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::sol {

/** fp16 bits -> fp32, exact (subnormals included; a scale is never inf or NaN in a fixture). */
__host__ __device__ __forceinline__ float int4_f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float mag = e == 0 ? ldexpf(float(m), -24) : ldexpf(float(m | 0x400), e - 25);
  return (h & 0x8000) ? -mag : mag;
#endif
}

/** Nibble `i` (0..7) of a packed int32 word. */
__host__ __device__ __forceinline__ int int4_nibble(int32_t word, int i) { return int((uint32_t(word) >> (4 * i)) & 0xFu); }

/** AWQ: output 8c + j sits in nibble kAwqSlot[j] of its word (the inverse of order 0,2,4,6,1,3,5,7). */
__host__ __device__ __forceinline__ int int4_awq_slot(int j) { return int((0x73625140u >> (4 * j)) & 0xFu); }

/** The code (0..15), zero point (0..15) and scale of W[n, k] in layout L. */
template <int L>
__host__ __device__ __forceinline__ void int4_weight_parts(const Int4Problem& g, int64_t n, int64_t k, int& q, int& z, float& s) {
  const int64_t G = g.groups;
  if constexpr (L == NIBBLE_INT4_LAYOUT_PLAIN) {
    const int64_t grp = k >> 7;
    const int byte = g.packed[n * (g.K / 2) + (k >> 1)];
    q = (k & 1) ? (byte >> 4) : (byte & 0xF);
    z = g.zero[n * G + grp];
    s = int4_f16_to_f32(g.scale[n * G + grp]);
  } else if constexpr (L == NIBBLE_INT4_LAYOUT_AWQ) {
    const int64_t grp = k >> 7;
    const int slot = int4_awq_slot(int(n & 7));
    q = int4_nibble(g.qweight[k * (g.N / 8) + (n >> 3)], slot);
    z = int4_nibble(g.qzeros[grp * (g.N / 8) + (n >> 3)], slot);
    s = int4_f16_to_f32(g.scale[grp * g.N + n]);
  } else if constexpr (L == NIBBLE_INT4_LAYOUT_GPTQ || L == NIBBLE_INT4_LAYOUT_GPTQ_G_IDX) {
    const int64_t grp = L == NIBBLE_INT4_LAYOUT_GPTQ_G_IDX ? int64_t(g.g_idx[k]) : (k >> 7);
    q = int4_nibble(g.qweight[(k >> 3) * g.N + n], int(k & 7));
    z = int4_nibble(g.qzeros[grp * (g.N / 8) + (n >> 3)], int(n & 7)) + 1;  // v1 stores zero - 1
    s = int4_f16_to_f32(g.scale[grp * g.N + n]);
  } else {
    static_assert(L == NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS, "an int4 layout of nibble_gemm.h");
    const int64_t grp = k >> 7;
    q = int4_nibble(g.qweight[n * (g.K / 8) + (k >> 3)], int(k & 7));
    z = g.qzeros ? int4_nibble(g.qzeros[(n >> 3) * G + grp], int(n & 7)) : 8;
    s = int4_f16_to_f32(g.scale[n * G + grp]);
  }
}

/** W[n, k] = (q - z) * s in layout L: exact in fp32 (4 bits times an fp16's 11). */
template <int L>
__host__ __device__ __forceinline__ float int4_weight(const Int4Problem& g, int64_t n, int64_t k) {
  int q, z;
  float s;
  int4_weight_parts<L>(g, n, k, q, z, s);
  return float(q - z) * s;
}

}  // namespace nibble::sol
