// shim of solutions/common/sm90_wgmma.cuh (and wgmma_rs.cuh) for the CPU emulation: the TMA tile load,
// wgmma and its commit / wait over emu_wgmma.h (asynchronous: an op runs when its group is retired);
// the fences and setmaxnreg do nothing.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "emu_wgmma.h"
#include "solutions/common/sm90_async.cuh"

namespace nibble::sol {

inline void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int k, int m) {
  ::emu::tma_load_2d(dst, map, smem_addr(bar), k, m);
}
inline void wgmma_fence() {}
inline void wgmma_commit() { ::emu::wgmma_commit(); }
template <int N>
inline void wgmma_wait() {
  ::emu::wgmma_wait(N);
}
template <int R>
inline void fence_acc(float (&)[R]) {}
inline uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
template <int R>
inline void setmaxnreg_dec() {}
template <int R>
inline void setmaxnreg_inc() {}
template <int kId, int kThreads>
inline void named_barrier_sync() {
  ::emu::named_barrier_sync(kId, kThreads);
}
inline void prefetch_tensormap(const void*) {}
template <int N>
inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  ::emu::wgmma_rs<N>(d, a, b);
}

}  // namespace nibble::sol
