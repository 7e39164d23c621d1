// mma_bf16.cuh: the warp-level bf16 tensor-core MMA the solutions share (mma.sync m16n8k16, sm_80+).
#pragma once

#include <cstdint>

namespace nibble::sol {

/** d += A B, mma.sync m16n8k16 bf16 x bf16 -> fp32 (PTX ISA, "Matrix fragments for mma.m16n8k16"):
 *  lane (g, t) passes A rows g / g + 8 at k 2t, 2t + 1 (a0, a1) and k 2t + 8, 2t + 9 (a2, a3), B
 *  column g at k 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), and holds d rows g (d0, d1) and g + 8
 *  (d2, d3) at columns 2t, 2t + 1. The lower k or column is the register's low half. */
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 mma.sync needs sm_80: a build for an older target compiles, and its prepare declines first
  // (a solution checks the device's compute capability), so this is never reached.
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/** The same MMA as asm volatile over an A-fragment array: the compiler keeps it in order with the
 *  other volatile asm. The FP4 small-M kernel's measured schedules (solutions/gemm_fp4/sm90/NOTES.md)
 *  were made with this form; whether the plain one above schedules as well is an A/B not yet run,
 *  so the kernels that had it keep it. */
__device__ __forceinline__ void mma_bf16_16816_ordered(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

}  // namespace nibble::sol
