// rope_kv_append.cu: RoPE on q and k at position pos, then k and v appended to the bf16 KV cache.
//
// Spec (seed / nibble.h): "RoPE rotate-half (pairs i, i+hd/2) at position pos on q and k; k,v
// appended at cache slot pos"; kv_cache (B, n_kv, max_seq, hd) bf16, updated in place.
// For pair i of a head: angle = pos * theta^(-2i/hd);
//   out[i] = x[i] cos - x[i+hd/2] sin,   out[i+hd/2] = x[i+hd/2] cos + x[i] sin.
// The {cos, sin} table is computed in double at build_model (an fp32 angle at pos ~ 2048 is off
// by ~1e-4 rad) and stored as fp32: (max_seq, hd/2) float2, 2 MB for the full config.
// Shapes: qkv fp32 [q (n_q*hd) | k (n_kv*hd) | v (n_kv*hd)]; q is rotated in place (fp32) for the
// attention kernel; k, v are rounded to bf16 (nearest-even) into slot pos.
// Bytes moved: (n_q + 2 n_kv) * hd * 4 read, n_q*hd*4 + 2 n_kv*hd*2 written, hd*4 of table.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace nibble::unfused {
namespace {

__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));  // round to nearest even
}

// Block b: heads [0, n_q) are q heads, [n_q, n_q + n_kv) k heads, then n_kv v heads.
// Thread i (< hd/2) owns the pair (i, i + hd/2).
__global__ void rope_kv_append_kernel(float* __restrict__ qkv, const float2* __restrict__ rope, int n_q, int n_kv,
                                      int hd, int max_seq, int pos, uint16_t* __restrict__ k_cache,
                                      uint16_t* __restrict__ v_cache) {
  const int head = blockIdx.x;
  const int half = hd / 2;
  const int i = threadIdx.x;
  if (i >= half) return;
  float* src = qkv + size_t(head) * hd;  // q, k and v heads are consecutive hd-long rows
  const float x1 = src[i], x2 = src[i + half];
  if (head < n_q + n_kv) {
    const float2 cs = rope[size_t(pos) * half + i];
    const float r1 = x1 * cs.x - x2 * cs.y;
    const float r2 = x2 * cs.x + x1 * cs.y;
    if (head < n_q) {
      src[i] = r1;
      src[i + half] = r2;
    } else {
      uint16_t* dst = k_cache + (size_t(head - n_q) * max_seq + pos) * hd;
      dst[i] = to_bf16_bits(r1);
      dst[i + half] = to_bf16_bits(r2);
    }
  } else {
    uint16_t* dst = v_cache + (size_t(head - n_q - n_kv) * max_seq + pos) * hd;
    dst[i] = to_bf16_bits(x1);
    dst[i + half] = to_bf16_bits(x2);
  }
}

}  // namespace

cudaError_t launch_rope_kv_append(float* qkv, const float2* rope, int n_q, int n_kv, int hd, int max_seq, int pos,
                                  uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  if (!qkv || !rope || !k_cache || !v_cache || n_q < 1 || n_kv < 1 || hd < 2 || hd % 2 != 0 || hd / 2 > 1024 ||
      pos < 0 || pos >= max_seq)
    return cudaErrorInvalidValue;
  const int threads = ((hd / 2 + 31) / 32) * 32;
  rope_kv_append_kernel<<<n_q + 2 * n_kv, threads, 0, stream>>>(qkv, rope, n_q, n_kv, hd, max_seq, pos, k_cache,
                                                               v_cache);
  return cudaGetLastError();
}

}  // namespace nibble::unfused
