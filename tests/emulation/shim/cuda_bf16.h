// shim/cuda_bf16.h: the bf16 types and conversions the emulated kernels use, bit for bit as CUDA's
// (round to nearest even; the float of a bf16 is exact).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"
#include "fixtures/bf16.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{nibble::f32_to_bf16(f)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline float __bfloat162float(__nv_bfloat16 b) { return nibble::bf16_to_f32(b.bits); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{__bfloat162float(v.x), __bfloat162float(v.y)}; }
