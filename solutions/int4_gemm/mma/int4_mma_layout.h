// int4_mma_layout.h: the repacked weight layout of the small-M int4 kernel (int4_mma_kernel.cuh, used
// by int4_gemm_mma and by int4_gemm_sm90 at M <= 16). Host and device: prepare repacks on the host,
// the kernel decodes in registers, and the CPU test (tests/int4_gemm/test_int4_mma_layout.cpp) runs
// this same decode on the host against every weight of the plain layout.
//
// The GEMM is C^T = W A^T: W's rows are the MMA's M side (a "slab" of 16 output rows per block), A's
// rows (M <= 16) its N side (one or two n8 tiles). Codes: solutions/int4_gemm/int4_frag.h, one unit
// per (slab, chunk of 64 k) in slab-major order (groups of one slab); register r of a step decodes to
// the exact integers q - z (biased_pair minus the row's bf16 pair of 128 + z). The MMA sums exact
// products (bf16 activations times integers of 5 bits) in fp32 per chunk, and the chunk's sum is
// scaled once per row in fp32: W is never rounded to bf16.
// Per slab and group of 128 (two chunks), 16 records {scale as fp32, the bf16 pair of 128 + zero}:
// record row r of group grp at ((slab G + grp) 16 + r). Padding: N to a multiple of 16 with code 0,
// zero 0 and scale 0 (the padded rows contribute 0 and are not written).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/fp16.h"
#include "solutions/int4_gemm/int4_frag.h"

namespace nibble::int4_mma {

using int4_frag::biased_pair;
using int4_frag::bf16_128_plus;
using int4_frag::frag_k;
using int4_frag::frag_row;
using int4_frag::kChunkK;
using int4_frag::kSlabRows;
inline constexpr int kGroup = int4_frag::kGroupK;
inline constexpr int kWordsPerLane = int4_frag::kWordsPerLaneChunk;

/** The record of one (slab, group, row): the scale and the bf16 pair {128 + z, 128 + z}. */
struct RowRecord {
  float scale;
  uint32_t zz;
};

/** The repacked weight of an (N, K) plain int4 triple (packed (N, K/2) low nibble = even k; scale
 *  (N, K/128) fp16 bits; zero (N, K/128)). */
struct Repacked {
  int64_t N = 0, K = 0, slabs = 0, chunks = 0, groups = 0;
  std::vector<uint32_t> words;      // (slabs, chunks, 32 lanes, 4 words)
  std::vector<RowRecord> records;   // (slabs, groups, 16 rows)
};

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
  r.words = int4_frag::repack_codes(packed, N, K, r.slabs * kSlabRows, 1);
  r.records.assign(size_t(r.slabs * r.groups * kSlabRows), RowRecord{0.0f, 0x43004300u});
  for (int64_t s = 0; s < r.slabs; ++s)
    for (int64_t grp = 0; grp < r.groups; ++grp)
      for (int row = 0; row < kSlabRows; ++row) {
        const int64_t n = s * kSlabRows + row;
        if (n >= N) continue;
        const uint32_t zz = bf16_128_plus(zero[n * r.groups + grp]);
        r.records[size_t((s * r.groups + grp) * kSlabRows + row)] = {f16_to_f32(scale[n * r.groups + grp]), zz | (zz << 16)};
      }
  return r;
}

}  // namespace nibble::int4_mma
