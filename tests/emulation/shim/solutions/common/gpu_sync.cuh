// shim of solutions/common/gpu_sync.cuh for the CPU emulation: plain accesses (the emulation is
// sequentially consistent); an acquire load yields, so that a fiber polling a flag lets the others run.
#pragma once

#include <cstdint>

#include "emu_async.h"

namespace nibble::sol {

inline unsigned ld_acquire_gpu(const unsigned* p) {
  ::emu::yield();
  return *p;
}
inline void st_release_gpu(unsigned* p, unsigned v) { *p = v; }
inline void red_release_gpu_inc(unsigned* p) { *p += 1; }
inline unsigned atom_release_gpu_inc(unsigned* p) { return (*p)++; }

}  // namespace nibble::sol
