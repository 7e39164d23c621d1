// wgmma_format.cuh: M > 16: the FP4 formats of the shared wgmma kernel (solutions/common/
// wgmma_dequant_gemm.cuh: W decoded into A-fragment registers, the activations through a TMA ring).
// Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one translation
// unit: the file comment there has the design).
#pragma once

#include "solutions/common/wgmma_dequant_gemm.cuh"
#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

/** NVFP4 (NV) or MXFP4 for sol::wgmma_kernel, in the kStd layout of fp4_frag.h: a lane group's
 *  record part is its 8 (NVFP4) or 4 (MXFP4) scale bytes at g * 2B; the epilogue multiplies by colmul
 *  (NVFP4: global x 2^8; MXFP4: 2^sh(n)). */
template <bool NV>
struct Fp4Format {
  static constexpr int kRecordBytes = scale_bytes_per_chunk(NV);
  static constexpr bool kColmul = true;
  static __device__ __forceinline__ void record_ldg(const uint8_t* p, uint2& r) {
    if constexpr (NV)
      r = __ldg(reinterpret_cast<const uint2*>(p));
    else
      r.x = __ldg(reinterpret_cast<const uint32_t*>(p));
  }
  static __device__ __forceinline__ void record_shared(const uint8_t* p, uint2& r) {
    if constexpr (NV)
      r = *reinterpret_cast<const uint2*>(p);
    else
      r.x = *reinterpret_cast<const uint32_t*>(p);
  }
  static __device__ __forceinline__ void decode(const uint4& q, const uint2& sw, uint32_t (&fr)[4][4]) {
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // kStd: step j is NVFP4 block j, MXFP4 block j / 2
      const int bi = NV ? j : j >> 1;
      const uint32_t w = NV ? (bi < 2 ? sw.x : sw.y) : sw.x;
      decode_step(qw[j], expand_scale<NV>(w, (2 * bi) & 3), expand_scale<NV>(w, (2 * bi + 1) & 3), fr[j]);
    }
  }
};

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
