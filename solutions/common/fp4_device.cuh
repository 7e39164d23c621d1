// fp4_device.cuh: e2m1 / e4m3fn / e8m0 -> fp32 in registers, for the FP4 GEMM solutions (issue 7).
//
// The formats are fixtures/fp4.h's (OCP MX v1.0, OCP FP8 E4M3): these decoders build the fp32 bit
// pattern with integer ops (the exponent-rebias trick), no table in memory, and are exact. The
// definition they must agree with is reference/gemm_fp4/gemm_oracle.h's (tests/gemm_fp4/test_gemm_solutions_gpu.cpp
// compares every solution against it); the reference's own dequantisation (reference/
// gemm_reference_kernels.cu) is written separately, as a table, for clarity.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fixtures/bf16.h"  // bits_f32: host and device

namespace nibble::sol {

/** e2m1 code (low 4 bits) -> fp32, exact: s.ee.m with bias 1. Exponent field e > 0 gives
 *  (1 + m/2) 2^(e-1), i.e. fp32 exponent e + 126 and mantissa bit 22 = m; e = 0 is the subnormal
 *  m * 0.5 (0x3F000000 = 0.5, or 0). Sign bit 3 -> bit 31 (0x8 is -0). */
__host__ __device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  const uint32_t e = (code >> 1) & 3u, m = code & 1u;
  const uint32_t mag = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3F000000u : 0u);
  return bits_f32(mag | ((code & 8u) << 28));
}

/** float8_e4m3fn byte -> fp32, exact: bias 7; exponent 0 is subnormal m * 2^-9; S.1111.111 is NaN;
 *  no Inf. A normal's fp32 exponent is e + 120, its 3 mantissa bits go to bits 22..20. */
__host__ __device__ __forceinline__ float e4m3_to_f32(uint32_t byte) {
  const uint32_t e = (byte >> 3) & 0xFu, m = byte & 7u;
  float mag;
  if ((byte & 0x7Fu) == 0x7Fu)
    mag = bits_f32(0x7FC00000u);
  else if (e == 0)
    mag = float(m) * 0.001953125f;  // m * 2^-9: exact (3-bit integer times a power of two)
  else
    mag = bits_f32(((e + 120u) << 23) | (m << 20));
  return (byte & 0x80u) ? -mag : mag;
}

/** e8m0 byte -> 2^(e - 127) in fp32, exact (e = 0 is the fp32 subnormal 2^-127 = 0x00400000);
 *  0xFF is NaN. */
__host__ __device__ __forceinline__ float e8m0_to_f32(uint32_t byte) {
  if (byte == 0xFFu) return bits_f32(0x7FC00000u);
  return bits_f32(byte ? (byte << 23) : 0x00400000u);
}

/** A block scale byte -> fp32: e4m3fn (NVFP4) or e8m0 (MXFP4). */
__host__ __device__ __forceinline__ float block_scale_to_f32(uint32_t byte, bool nvfp4) {
  return nvfp4 ? e4m3_to_f32(byte) : e8m0_to_f32(byte);
}

}  // namespace nibble::sol
