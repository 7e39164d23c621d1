// int4_mma_layout.h: the repacked weight layout of int4_gemm_mma (gemm-w4a16-int4 at small M) and the
// register decode that turns it into bf16 tensor-core A fragments. Host and device: prepare repacks on
// the host, the kernel decodes in registers, and the CPU test (tests/int4_gemm/test_int4_mma_layout.cpp)
// runs this same decode on the host against every weight of the plain layout.
//
// The GEMM is C^T = W A^T: W's rows are the MMA's M side (a "slab" of 16 output rows per block), A's
// rows (M <= 16) its N side (one or two n8 tiles). mma.sync m16n8k16's A fragment of lane (g, t)
// (g = lane / 4, t = lane % 4), register r (0..3), element e (0..1): row g + 8 (r & 1), k 2t + 8 (r >> 1) + e
// of the k16 step. Repacked codes: per slab and per chunk of 64 k, 512 bytes = 32 lanes x 16 bytes,
// lane-major, so one 16-byte load per lane fetches its 4 k16 steps: word j of a lane is step j, and
// its byte r holds register r, element 0 in the low nibble, element 1 in the high one.
// Decode: byte r -> the bf16 pair {128 + q0, 128 + q1} (0x4300 | q is the bf16 of 128 + q: 8
// significant bits), minus the pair {128 + z, 128 + z} of the register's row: (q - z) exactly, a
// small integer. The MMA sums exact products (bf16 activations times integers of 5 bits) in fp32 per
// chunk, and the chunk's sum is scaled once per row in fp32: W is never rounded to bf16.
// Per slab and group of 128 (two chunks), 16 records {scale as fp32, the bf16 pair of 128 + zero}:
// record row r of group grp at ((slab G + grp) 16 + r). Padding: N to a multiple of 16 with code 0,
// zero 0 and scale 0 (the padded rows contribute 0 and are not written).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define INT4_MMA_HD __host__ __device__ __forceinline__
#else
#define INT4_MMA_HD inline
#endif

namespace nibble::int4_mma {

inline constexpr int kSlabRows = 16;   // W rows per block (the MMA's M)
inline constexpr int kChunkK = 64;     // k per chunk: one 16-byte load per lane
inline constexpr int kGroup = 128;     // k per scale and zero point
inline constexpr int kWordsPerLane = 4;

/** The record of one (slab, group, row): the scale and the bf16 pair {128 + z, 128 + z}. */
struct RowRecord {
  float scale;
  uint32_t zz;
};

/** bf16 bits of 128 + v for v in 0..15 (exact). */
INT4_MMA_HD uint32_t bf16_128_plus(uint32_t v) { return 0x4300u | v; }

/** The row (within the slab) and k (within the chunk) of lane (g, t), step j, register r, element e. */
INT4_MMA_HD int frag_row(int g, int r) { return g + 8 * (r & 1); }
INT4_MMA_HD int frag_k(int t, int j, int r, int e) { return 16 * j + 2 * t + 8 * (r >> 1) + e; }

/** Register r of a step's word: the bf16 pair {128 + q0, 128 + q1} of byte r. */
INT4_MMA_HD uint32_t biased_pair(uint32_t word, int r) {
  const uint32_t x = word >> (8 * r);
  return 0x43004300u | (x & 0xFu) | ((x << 12) & 0xF0000u);
}

/** The repacked weight of an (N, K) plain int4 triple (packed (N, K/2) low nibble = even k; scale
 *  (N, K/128) fp16 bits; zero (N, K/128)). */
struct Repacked {
  int64_t N = 0, K = 0, slabs = 0, chunks = 0, groups = 0;
  std::vector<uint32_t> words;      // (slabs, chunks, 32 lanes, 4 words)
  std::vector<RowRecord> records;   // (slabs, groups, 16 rows)
};

/** fp16 bits -> fp32, exact. */
inline float f16_bits_to_f32(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float v = e == 0 ? float(m) * 0x1p-24f : e == 31 ? (m ? NAN : INFINITY) : float(m | 0x400) * float(1u << e) * 0x1p-25f;
  return (h & 0x8000) ? -v : v;
}

/** Repack (host). Throws std::invalid_argument unless K % 128 == 0 and the sizes match. */
inline Repacked repack(const uint8_t* packed, const uint16_t* scale, const uint8_t* zero, int64_t N, int64_t K) {
  if (N <= 0 || K <= 0 || K % kGroup != 0)
    throw std::invalid_argument("int4_mma: N " + std::to_string(N) + ", K " + std::to_string(K) + ": K must be a multiple of 128");
  Repacked r;
  r.N = N;
  r.K = K;
  r.slabs = (N + kSlabRows - 1) / kSlabRows;
  r.chunks = K / kChunkK;
  r.groups = K / kGroup;
  r.words.assign(size_t(r.slabs * r.chunks * 32 * kWordsPerLane), 0u);
  r.records.assign(size_t(r.slabs * r.groups * kSlabRows), RowRecord{0.0f, 0x43004300u});
  auto code = [&](int64_t n, int64_t k) -> uint32_t {
    if (n >= N) return 0;
    const uint8_t b = packed[n * (K / 2) + k / 2];
    return (k & 1) ? (b >> 4) : (b & 0xF);
  };
  for (int64_t s = 0; s < r.slabs; ++s)
    for (int64_t c = 0; c < r.chunks; ++c)
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kWordsPerLane; ++j) {
          const int g = lane / 4, t = lane % 4;
          uint32_t w = 0;
          for (int reg = 0; reg < 4; ++reg)
            for (int e = 0; e < 2; ++e)
              w |= code(s * kSlabRows + frag_row(g, reg), c * kChunkK + frag_k(t, j, reg, e)) << (8 * reg + 4 * e);
          r.words[size_t(((s * r.chunks + c) * 32 + lane) * kWordsPerLane + j)] = w;
        }
  for (int64_t s = 0; s < r.slabs; ++s)
    for (int64_t grp = 0; grp < r.groups; ++grp)
      for (int row = 0; row < kSlabRows; ++row) {
        const int64_t n = s * kSlabRows + row;
        if (n >= N) continue;
        const uint32_t zz = bf16_128_plus(zero[n * r.groups + grp]);
        r.records[size_t((s * r.groups + grp) * kSlabRows + row)] = {f16_bits_to_f32(scale[n * r.groups + grp]),
                                                                     zz | (zz << 16)};
      }
  return r;
}

}  // namespace nibble::int4_mma
