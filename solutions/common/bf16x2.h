// bf16x2.h: the packed-bf16 arithmetic the fragment decoders use (two bf16 in one 32-bit register,
// element 0 in the low half), on the device as one instruction and on the host bit for bit the same,
// so that the CPU tests run the kernels' decode (fp4_frag.h, int4_frag.h).
#pragma once

#include <cstdint>

#include "fixtures/bf16.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

#if defined(__CUDA_ARCH__)
#define NIBBLE_BF16X2_HD __device__ __forceinline__
#else
#define NIBBLE_BF16X2_HD inline
#endif

namespace nibble::sol {

/** a x b per half, rounded to bf16 (RNE): mul.rn.bf16x2 (PTX ISA, sm_90). */
NIBBLE_BF16X2_HD uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  const auto half = [](uint32_t x, uint32_t y) -> uint32_t {
    return f32_to_bf16(bf16_to_f32(uint16_t(x)) * bf16_to_f32(uint16_t(y)));
  };
  return half(a & 0xFFFFu, b & 0xFFFFu) | (half(a >> 16, b >> 16) << 16);
#endif
}

/** a - b per half, rounded to bf16 (RNE): __hsub2 (sub.bf16x2 on sm_90, an fma on sm_80). The
 *  host side computes in fp32 first: exact for the decoders' operands (integers 128..143). */
NIBBLE_BF16X2_HD uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&d);
#else
  const auto half = [](uint32_t x, uint32_t y) -> uint32_t {
    return f32_to_bf16(bf16_to_f32(uint16_t(x)) - bf16_to_f32(uint16_t(y)));
  };
  return half(a & 0xFFFFu, b & 0xFFFFu) | (half(a >> 16, b >> 16) << 16);
#endif
}

/** {x, x}: half h (0 low, 1 high) of w in both halves (one PRMT). */
NIBBLE_BF16X2_HD uint32_t bf16x2_broadcast(uint32_t w, int h) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(w), "r"(h ? 0x3232u : 0x1010u));
  return d;
#else
  const uint32_t x = h ? (w >> 16) : (w & 0xFFFFu);
  return x | (x << 16);
#endif
}

}  // namespace nibble::sol
