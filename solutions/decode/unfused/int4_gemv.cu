// int4_gemv.cu: y = W x (+ residual) with W an int4 group-128 asymmetric matrix (AWQ/GPTQ layout).
//
// Spec (seed, "The weight format"): packed (out, in/2) uint8, LOW nibble = EVEN input index;
// scale (out, in/128) bf16; zero (out, in/128) uint8; value = (code - zero) * scale.
// Shapes in the full config: q 3072x3072, k/v 1024x3072, o 3072x3072, gate/up 8192x3072,
// down 3072x8192, LM head 128256x3072 (the tied embedding). x is fp32 (or bf16), y fp32.
// Bytes moved: rows*in/2 packed + rows*in/128*3 scale/zero + in*4 (x, from L2) + rows*4 (y)
// (+ rows*4 residual): 4.94 MB for q, 13.2 MB for down, 206.6 MB for the LM head.
//
// Design. The codes are unpacked in registers; no dequantised copy of W ever exists in memory.
// - One uint4 (128-bit) load = 16 bytes = 32 codes = exactly a quarter of a group, so every load
//   needs one (scale, zero) pair and never straddles groups.
// - (code - zero) is formed exactly with the 2^23 trick: as_float(0x4B000000 | code) = 2^23 + code
//   exactly, minus (2^23 + zero) gives the small integer code - zero in fp32 with no I2F.
//   The scale is factored out of the inner loop: a = sum_{32 codes} (code - zero) * x, then
//   acc += scale * a (fp32 throughout).
// - A warp owns kRowsPerWarp rows: lane l reads quarter-groups l, l+32, ... of each row, so a warp's
//   loads are 512 contiguous bytes per row. Each x value loaded (L1/L2) is reused for
//   kRowsPerWarp rows: with one row per warp, x traffic through L1 (8 bytes of fp32 x per byte of
//   weights) would exceed L1 bandwidth before HBM is saturated.
// - kChunksInFlight quarter-groups x kRowsPerWarp rows = 8 independent 16-byte loads per lane are
//   issued before the first FMA; weights are read exactly once, so they are loaded with the
//   streaming hint (evict-first) to leave L2 to x, the scales and the KV cache.
// - Up to three matrices sharing x (q, k, v; gate, up) go in one launch: the k and v projections
//   alone are too small to fill the GPU, and every launch pays a ramp and a tail.
// - Rows past a matrix's end (out not a multiple of kRowsPerWarp) are clamped for loading and never
//   stored.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace nibble::unfused {
namespace {

constexpr int kRowsPerWarp = 4;
constexpr int kChunksInFlight = 2;  // quarter-groups per lane per batch of loads
constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kCodesPerChunk = 32;  // one uint4 of packed bytes
constexpr int kChunksPerGroup = kGroup / kCodesPerChunk;

struct GemvParams {
  Int4Matrix m[kMaxGemvMatrices];
  int warp_begin[kMaxGemvMatrices + 1];  // prefix sums of warps per matrix
  int n_mats;
  int in;
};

__device__ __forceinline__ float bf16_bits_to_float(uint32_t b) { return __uint_as_float(b << 16); }

/** The 32 activations of quarter-group c: x[32c .. 32c+31]. */
__device__ __forceinline__ void load_x32(const float* __restrict__ x, int c, float (&xs)[32]) {
  const float4* p = reinterpret_cast<const float4*>(x + size_t(c) * kCodesPerChunk);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = __ldg(p + i);
    xs[4 * i + 0] = v.x;
    xs[4 * i + 1] = v.y;
    xs[4 * i + 2] = v.z;
    xs[4 * i + 3] = v.w;
  }
}

__device__ __forceinline__ void load_x32(const uint16_t* __restrict__ x, int c, float (&xs)[32]) {
  const uint4* p = reinterpret_cast<const uint4*>(x + size_t(c) * kCodesPerChunk);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = __ldg(p + i);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      xs[8 * i + 2 * j + 0] = __uint_as_float(w[j] << 16);          // element at the lower address
      xs[8 * i + 2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }
}

/** sum_{k<32} (code_k - zero) * xs[k] for the 32 codes of one uint4; zmagic = 2^23 + zero.
 *  Code k sits in 32-bit word k/8 (little-endian bytes), bits 4*(k%8) .. +3: byte b's low nibble is
 *  element 2b, its high nibble element 2b+1. */
__device__ __forceinline__ float dot_quarter_group(const uint4 w, float zmagic, const float (&xs)[32]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  float a = 0.f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float cz = __uint_as_float(0x4B000000u | ((ws[q] >> (4 * k)) & 0xFu)) - zmagic;  // exact
      a = fmaf(cz, xs[8 * q + k], a);
    }
  }
  return a;
}

template <typename TX>
__global__ void __launch_bounds__(kThreads) int4_gemv_kernel(const GemvParams p, const TX* __restrict__ x) {
  const int warp = int((blockIdx.x * kThreads + threadIdx.x) >> 5);
  const int lane = int(threadIdx.x & 31);
  if (warp >= p.warp_begin[kMaxGemvMatrices]) return;  // warp-uniform; unused entries hold the total

  // Pick this warp's matrix with compile-time indices only (a run-time index into the parameter
  // struct would copy it to local memory).
  Int4Matrix m = p.m[0];
  int wb = 0;
#pragma unroll
  for (int i = 1; i < kMaxGemvMatrices; ++i) {
    if (i < p.n_mats && warp >= p.warp_begin[i]) {
      m = p.m[i];
      wb = p.warp_begin[i];
    }
  }

  const int in = p.in;
  const int n_chunks = in / kCodesPerChunk;  // quarter-groups per row
  const int n_groups = in / kGroup;
  const int row0 = (warp - wb) * kRowsPerWarp;

  const uint4* wrow[kRowsPerWarp];
  const uint16_t* srow[kRowsPerWarp];
  const uint8_t* zrow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = min(row0 + r, m.rows - 1);  // clamped: loaded, never stored
    wrow[r] = reinterpret_cast<const uint4*>(m.packed + size_t(row) * size_t(in / 2));
    srow[r] = m.scale + size_t(row) * n_groups;
    zrow[r] = m.zero + size_t(row) * n_groups;
  }

  float acc[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) acc[r] = 0.f;

  for (int c0 = lane; c0 < n_chunks; c0 += 32 * kChunksInFlight) {
    uint4 w[kChunksInFlight][kRowsPerWarp];
    float s[kChunksInFlight][kRowsPerWarp];
    float zm[kChunksInFlight][kRowsPerWarp];
    // All loads of the batch first, so they are in flight together.
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int c = c0 + 32 * k;
      const bool ok = c < n_chunks;
      const int g = c / kChunksPerGroup;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        w[k][r] = ok ? __ldcs(wrow[r] + c) : make_uint4(0u, 0u, 0u, 0u);
        s[k][r] = ok ? bf16_bits_to_float(__ldg(srow[r] + g)) : 0.f;
        zm[k][r] = ok ? 8388608.f + float(__ldg(zrow[r] + g)) : 8388608.f;
      }
    }
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int c = c0 + 32 * k;
      if (c < n_chunks) {
        float xs[32];
        load_x32(x, c, xs);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r] = fmaf(s[k][r], dot_quarter_group(w[k][r], zm[k][r], xs), acc[r]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], off);
  }
  // Lane r stores row row0 + r (every lane holds every sum after the butterfly).
  float v = acc[0];
#pragma unroll
  for (int r = 1; r < kRowsPerWarp; ++r)
    if (lane == r) v = acc[r];
  const int row = row0 + lane;
  if (lane < kRowsPerWarp && row < m.rows) {
    if (m.residual) v = m.residual[row] + v;  // read before the write: residual may alias y
    m.y[row] = v;
  }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

template <typename TX>
cudaError_t launch(const Int4Matrix* mats, int n_mats, const TX* x, int in, cudaStream_t stream) {
  if (!mats || n_mats < 1 || n_mats > kMaxGemvMatrices || !x || !aligned16(x) || in <= 0 || in % kGroup != 0)
    return cudaErrorInvalidValue;
  GemvParams p{};
  p.n_mats = n_mats;
  p.in = in;
  long long warps = 0;
  for (int i = 0; i < n_mats; ++i) {
    const Int4Matrix& m = mats[i];
    if (m.rows < 1 || !m.packed || !aligned16(m.packed) || !m.scale || !m.zero || !m.y) return cudaErrorInvalidValue;
    p.m[i] = m;
    p.warp_begin[i] = int(warps);
    warps += (m.rows + kRowsPerWarp - 1) / kRowsPerWarp;
  }
  if (warps * 32 > (1ll << 31) - 1) return cudaErrorInvalidValue;
  for (int i = n_mats; i <= kMaxGemvMatrices; ++i) p.warp_begin[i] = int(warps);
  const unsigned blocks = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  int4_gemv_kernel<TX><<<blocks, kThreads, 0, stream>>>(p, x);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_int4_gemv(const Int4Matrix* mats, int n_mats, const float* x, int in, cudaStream_t stream) {
  return launch<float>(mats, n_mats, x, in, stream);
}

cudaError_t launch_int4_gemv_bf16x(const Int4Matrix* mats, int n_mats, const uint16_t* x, int in,
                                   cudaStream_t stream) {
  return launch<uint16_t>(mats, n_mats, x, in, stream);
}

}  // namespace nibble::unfused
