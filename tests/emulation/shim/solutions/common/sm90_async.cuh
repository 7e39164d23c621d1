// shim of solutions/common/sm90_async.cuh for the CPU emulation: only what the small-M kernel uses
// (the streamed load, the timeline clock); the asynchronous-copy primitives are not emulated.
#pragma once

#include <cuda_runtime.h>

namespace nibble::sol {
inline unsigned long long globaltimer_ns() {
  static unsigned long long t = 0;
  return ++t;
}
inline uint4 ld_stream(const uint4* p) { return __ldcs(p); }
}  // namespace nibble::sol

// Declared only, for the using-declarations of the headers the emulated kernels include; the
// asynchronous copies themselves are not emulated (a call would not link).
namespace nibble::sol {
void bulk_load();
void mbar_arrive();
void mbar_expect_tx();
void mbar_init();
void mbar_init_fence();
void mbar_wait();
uint64_t policy_evict_first();
uint64_t policy_evict_last();
uint32_t smem_addr(const void*);
}  // namespace nibble::sol
