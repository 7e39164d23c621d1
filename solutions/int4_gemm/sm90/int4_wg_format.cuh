// int4_wg_format.cuh: the int4 weight format of the shared wgmma kernel (sol::wgmma_kernel,
// solutions/common/wgmma_dequant_gemm.cuh) for int4_gemm_sm90, over the layout of int4_wg_layout.h;
// its own header so that the CPU emulation (tests/emulation) runs the kernel with it too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "solutions/int4_gemm/sm90/int4_wg_layout.h"

namespace nibble::int4_sm90 {

/** int4 for sol::wgmma_kernel: the records of int4_wg_layout.h, no epilogue factor; bulk-copied
 *  weights only (no record_ldg). */
struct Int4WgFormat {
  static constexpr int kRecordBytes = int4_sm90::kRecordBytes;
  static constexpr bool kColmul = false;
  static __device__ __forceinline__ void record_shared(const uint8_t* p, uint2& r) {
    r = *reinterpret_cast<const uint2*>(p);
  }
  static __device__ __forceinline__ void decode(const uint4& q, const uint2& rec, uint32_t (&fr)[4][4]) {
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    decode_chunk(qw, rec.x, rec.y, fr);
  }
};

}  // namespace nibble::int4_sm90
