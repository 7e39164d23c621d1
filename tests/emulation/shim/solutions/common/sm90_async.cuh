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
