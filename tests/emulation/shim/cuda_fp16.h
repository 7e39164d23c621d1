// shim/cuda_fp16.h: the fp16 bit casts and conversions the emulated kernels use.
#pragma once

#include <cstdint>

#include "cuda_runtime.h"
#include "fixtures/fp16.h"

struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(uint16_t b) { return __half{b}; }
inline float __half2float(__half h) { return nibble::f16_to_f32(h.bits); }
