// shim of solutions/common/mma_bf16.cuh for the CPU emulation: mma.sync m16n8k16 as a warp collective
// over the 32 fibers of a warp (emu::mma_warp, from the PTX ISA's fragment tables).
#pragma once

#include <cstdint>

#include "emu_core.h"

namespace nibble::sol {

inline void mma_bf16_16816_ordered(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::emu::mma_sync(d, a, b0, b1);
}
inline void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  const uint32_t a[4] = {a0, a1, a2, a3};
  ::emu::mma_sync(d, a, b0, b1);
}

}  // namespace nibble::sol
