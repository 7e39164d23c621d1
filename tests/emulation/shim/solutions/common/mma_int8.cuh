// shim of solutions/common/mma_int8.cuh for the CPU emulation: mma.sync m16n8k32 u8 x s8 -> s32 as a
// warp collective over the 32 fibers of a warp (emu::imma_sync, from the PTX ISA's fragment table).
#pragma once

#include <cstdint>

#include "emu_core.h"

namespace nibble::sol {

inline void imma_16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  const uint32_t a[4] = {a0, a1, a2, a3};
  ::emu::imma_sync(c, a, b0, b1);
}

}  // namespace nibble::sol
