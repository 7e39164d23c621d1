// device_common.cuh: the device helpers the solution's mma.sync kernels use (mma.sync, fragment decode); the
// streamed load and the wgmma helpers come from solutions/common/wgmma_dequant_gemm.cuh
// Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one translation
// unit: the kernels keep their names and code; the file comment there has the design).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "solutions/common/mma_bf16.cuh"
#include "solutions/common/sm90_async.cuh"
#include "solutions/gemm_fp4/sm90/fp4_frag.h"

namespace nibble::gemm_fp4_sm90 {
namespace {

using sol::bulk_load;
using sol::ld_stream;
using sol::mbar_arrive;
using sol::mbar_expect_tx;
using sol::mbar_init;
using sol::mbar_wait;
using sol::mma_bf16_16816_ordered;  // the asm volatile form these kernels were measured with
using sol::policy_evict_first;
using sol::policy_evict_last;
using sol::smem_addr;
// ---- small device helpers -----------------------------------------------------------------------

/** The 4 A-fragment registers of k16 step j: word q, scales s_lo (row g) and s_hi (row g + 8). */
__device__ __forceinline__ void decode_step(uint32_t q, uint32_t s_lo, uint32_t s_hi, uint32_t (&a)[4]) {
  a[0] = decode_reg(q, 0, s_lo);
  a[1] = decode_reg(q, 1, s_hi);
  a[2] = decode_reg(q, 2, s_lo);
  a[3] = decode_reg(q, 3, s_hi);
}

/** One kPerm chunk (16 weight rows x 64 k) of lane (g, t) into NT n8 tiles: q = its 16 bytes of
 *  codes, sw = its 2 scale bytes, lo[nt] / hi[nt] = the 8 + 8 bf16 activations of k 16 t .. 16 t + 15
 *  of the chunk for column 8 nt + g (zeros past M or K); acc[nt] += decode(q) x B (fp32). */
template <bool NV, int NT>
__device__ __forceinline__ void chunk_mma(const uint4& q, uint32_t sw, const uint4 (&lo)[NT], const uint4 (&hi)[NT],
                                          float (&acc)[NT][4]) {
  const uint32_t s_lo = expand_scale<NV>(sw, 0), s_hi = expand_scale<NV>(sw, 1);
  const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t a[4];
    decode_step(qw[j], s_lo, s_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // step j reads k 4 j .. 4 j + 3 of the lane's 16: words 2 j, 2 j + 1 of lo|hi
      const uint4& v = j < 2 ? lo[nt] : hi[nt];
      const uint32_t b0 = (j & 1) ? v.z : v.x, b1 = (j & 1) ? v.w : v.y;
      mma_bf16_16816_ordered(acc[nt], a, b0, b1);
    }
  }
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
