// mma_int8.cuh: the warp-level integer tensor-core MMA the solutions share (mma.sync m16n8k32
// u8 x s8 -> s32, sm_80+): the megakernel's int4 GEMV (codes as u8 A, activation limbs as s8 B).
#pragma once

#include <cstdint>

namespace nibble::sol {

/** c += A B, mma.m16n8k32 u8 (A: codes or 16 x codes) x s8 (B: x limbs) -> s32: exact (PTX ISA,
 *  "Matrix fragments for mma.m16n8k32"): lane (g, t) passes A rows g (a0, a2) and g + 8 (a1, a3)
 *  at k 4t..4t+3 (a0, a1) and 16 + 4t..+3 (a2, a3), B column g at k 4t..4t+3 (b0) and 16 + 4t..+3
 *  (b1), the lowest k in the lowest byte; it holds c rows g (c0, c1) and g + 8 (c2, c3) at columns
 *  2t, 2t + 1. Not volatile, so the compiler may interleave the independent chains. */
__device__ __forceinline__ void imma_16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace nibble::sol
