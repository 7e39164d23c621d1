// embed.cu: h = dequant(embed)[token], the int4 embedding row of this step's token, as fp32.
//
// Spec (seed): weights["embed"] (vocab, d) int4 triple, value = (code - zero) * scale; the same
// table is the tied LM head. token_ids (B,) int64 *on the GPU*: it is read here, on the device,
// so decode_step never synchronises on a device-to-host copy.
// Shapes: packed (vocab, d/2) uint8, scale/zero (vocab, d/128); h (d) fp32.
// Bytes moved: one row, d/2 + 3*d/128 bytes (1.6 KB for d = 3072), plus d*4 written.
// (code - zero) * scale is exact in fp32 (a 5-bit integer times an 8-bit mantissa).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels.h"

namespace nibble::unfused {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    embed_kernel(const int64_t* __restrict__ token, const uint8_t* __restrict__ packed,
                 const uint16_t* __restrict__ scale, const uint8_t* __restrict__ zero, int vocab, int d,
                 float* __restrict__ h) {
  const int64_t t = *token;
  const bool valid = t >= 0 && t < vocab;
  const int half = d / 2, n_groups = d / kGroup;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < half; i += gridDim.x * kThreads) {
    float lo = NAN, hi = NAN;  // an out-of-range token id poisons the step instead of reading wild
    if (valid) {
      const uint32_t byte = packed[size_t(t) * half + i];
      const int g = (2 * i) / kGroup;
      const float s = __uint_as_float(uint32_t(scale[size_t(t) * n_groups + g]) << 16);
      const int z = zero[size_t(t) * n_groups + g];
      lo = float(int(byte & 0xFu) - z) * s;  // low nibble: even element
      hi = float(int(byte >> 4) - z) * s;    // high nibble: odd element
    }
    h[2 * i] = lo;
    h[2 * i + 1] = hi;
  }
}

}  // namespace

cudaError_t launch_embed(const int64_t* token, const Int4Matrix& embed, int d, float* h, cudaStream_t stream) {
  if (!token || !embed.packed || !embed.scale || !embed.zero || embed.rows < 1 || d <= 0 || d % kGroup != 0 || !h)
    return cudaErrorInvalidValue;
  const int blocks = (d / 2 + kThreads - 1) / kThreads;
  embed_kernel<<<blocks, kThreads, 0, stream>>>(token, embed.packed, embed.scale, embed.zero, embed.rows, d, h);
  return cudaGetLastError();
}

}  // namespace nibble::unfused
