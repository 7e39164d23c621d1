// mma_format.cuh: M <= 16 and the K % 8 != 0 fallback: the FP4 formats of the shared small-M kernel
// (solutions/common/mma_dequant_gemm.cuh: mma.sync with 16-byte loads from each lane, the default at
// small M). Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one
// translation unit: the file comment there has the design).
#pragma once

#include "solutions/common/mma_dequant_gemm.cuh"
#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

using sol::kMmaMarks;
using sol::kMmaWarps;
using sol::mma_batch;

/** NVFP4 (NV) or MXFP4 for sol::mma_dequant_kernel, in fp4_frag.h's layout: one record per chunk
 *  (its scale bytes, re-encoded), the scale folded into the decoded bf16 weight (exact), the
 *  epilogue multiplying by colmul (NVFP4: global x 2^8; MXFP4: 2^sh(n)). */
template <bool NV>
struct Fp4MmaFormat {
  static constexpr int kRecordBytes = scale_bytes_per_chunk(NV);
  static constexpr int kChunksPerRecord = 1;
  static constexpr bool kColmul = true;
  static constexpr bool kChunkScale = false;
  struct Record {
    uint32_t w[2];
  };
  /** kPerm: the lane's 2 scale bytes of block t (NVFP4) or t / 2 (MXFP4); kStd: 8 or 4 bytes at g * 2B. */
  template <bool PERM>
  static __device__ __forceinline__ void load_record(const uint8_t* sr, int g, int t, Record& r) {
    if constexpr (PERM) {
      r.w[0] = __ldg(reinterpret_cast<const uint16_t*>(sr) + (NV ? t : t >> 1) * 8 + g);
    } else if constexpr (NV) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(sr) + g);
      r.w[0] = v.x, r.w[1] = v.y;
    } else {
      r.w[0] = __ldg(reinterpret_cast<const uint32_t*>(sr) + g);
    }
  }
  template <bool PERM>
  static __device__ __forceinline__ void decode_step(uint32_t q, const Record& r, int j, uint32_t (&a)[4]) {
    uint32_t s_lo, s_hi;
    if constexpr (PERM) {  // one scale block per lane and chunk
      s_lo = expand_scale<NV>(r.w[0], 0);
      s_hi = expand_scale<NV>(r.w[0], 1);
    } else {  // kStd: step j is NVFP4 block j, MXFP4 block j / 2
      const int bi = NV ? j : j >> 1;
      const uint32_t sw = bi < 2 ? r.w[0] : r.w[1];
      s_lo = expand_scale<NV>(sw, (2 * bi) & 3);
      s_hi = expand_scale<NV>(sw, (2 * bi + 1) & 3);
    }
    gemm_fp4_sm90::decode_step(q, s_lo, s_hi, a);
  }
  static __device__ __forceinline__ void scale_chunk(const Record&, const float (&)[4], float (&)[4]) {}
};

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
