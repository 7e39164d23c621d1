// int4_mma_layout.h: the repacked weight layout of the small-M int4 path (the shared small-M kernel,
// solutions/common/mma_dequant_gemm.cuh, with the format of int4_mma_kernel.cuh; int4_gemm_mma and
// int4_gemm_sm90 at M <= 16) and its register decode. Host and device: prepare repacks on the host,
// the kernel decodes in registers, and the CPU test (tests/int4_gemm/test_int4_mma_layout.cpp) runs
// this same decode on the host against every weight of the plain layout.
//
// The GEMM is C^T = W A^T: W's rows are the MMA's M side (a "slab" of 16 output rows per block), A's
// rows (M <= 16) its N side (one or two n8 tiles). Codes: solutions/int4_gemm/int4_frag.h in the kPerm
// k order (a lane's activations of a chunk are k 16t .. 16t + 15 of its row: two 16-byte loads), one
// unit per (slab, chunk of 64 k) in slab-major order. Register r of a step decodes to the exact
// integers q - z (biased_pair minus the row's bf16 pair of 128 + z); the MMA sums exact products
// (bf16 activations times integers of 5 bits) in fp32 per chunk, and the chunk's sum is scaled once
// per row in fp32 (the fp16 scale, exact): W is never rounded.
// Records: per slab and group of 128 k (two chunks), 64 bytes; lane group g's 8 at 8 g:
//   word 0  {128 + zero of row g, 128 + zero of row g + 8} as bf16 bits
//   word 1  {fp16 scale of row g, fp16 scale of row g + 8} as they are
// Padding: N to a multiple of 16 with code 0, zero 0 and scale 0 (the padded rows contribute 0 and
// are not written). Bytes per call: N K / 2 of codes + N K / 32 of records (6.25%).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/fp16.h"
#include "solutions/int4_gemm/int4_frag.h"

namespace nibble::int4_mma {

using int4_frag::biased_pair;
using int4_frag::bf16_128_plus;
using int4_frag::kChunkK;
using int4_frag::kSlabRows;
inline constexpr int kGroup = int4_frag::kGroupK;
inline constexpr int kWordsPerLane = int4_frag::kWordsPerLaneChunk;
inline constexpr int kRecordBytes = 64;  // per slab and group: 8 lane groups x {128 + zero pair, fp16 scale pair}

/** Register r of a step word for the record's {128 + z} pair zz of its row group: {q0 - z, q1 - z}
 *  as bf16, exact. */
NIBBLE_FRAG_HD uint32_t decode_reg(uint32_t word, int r, uint32_t zz_pairs) {
  return sol::bf16x2_sub(biased_pair(word, r), sol::bf16x2_broadcast(zz_pairs, r & 1));
}

/** The repacked weight of an (N, K) plain int4 triple (packed (N, K/2) low nibble = even k; scale
 *  (N, K/128) fp16 bits; zero (N, K/128)). */
struct Repacked {
  int64_t N = 0, K = 0, slabs = 0, chunks = 0, groups = 0;
  std::vector<uint32_t> words;   // (slabs, chunks, 32 lanes, 4 words), kPerm order
  std::vector<uint8_t> records;  // (slabs, groups) x kRecordBytes
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
  r.words = int4_frag::repack_codes(packed, N, K, r.slabs * kSlabRows, 1, sol::KOrder::kPerm);
  r.records.assign(size_t(r.slabs * r.groups * kRecordBytes), 0u);
  for (int64_t n = 0; n < r.slabs * kSlabRows; ++n)
    for (int64_t grp = 0; grp < r.groups; ++grp) {
      const int row = int(n % kSlabRows), g = row % 8, h = row / 8;
      uint8_t* rec = &r.records[size_t(((n / kSlabRows) * r.groups + grp) * kRecordBytes + 8 * g)];
      const uint16_t zz = uint16_t(bf16_128_plus(n < N ? zero[n * r.groups + grp] : 0u));
      const uint16_t s = n < N ? scale[n * r.groups + grp] : 0;
      std::memcpy(rec + 2 * h, &zz, 2);      // word 0, half h (little-endian: half 0 is the low one)
      std::memcpy(rec + 4 + 2 * h, &s, 2);   // word 1, half h
    }
  return r;
}

}  // namespace nibble::int4_mma
