// int4_frag.h: int4 weight codes in tensor-core fragment order, shared by the family's tensor-core
// solutions (int4_gemm_mma, int4_gemm_sm90) and their CPU tests. Host and device.
//
// Units (solutions/common/frag_units.h): per 16-row slab and 64-k chunk, 32 lanes x 4 words, word j
// of lane (g, t) = k16 step j. Register r's element e (row frag_row(g, r), k frag_k(t, j, r, e)) is
// the word's nibble r + 4e (bits 4r + 16e), so register r is (word >> 4r) & 0x000F000F: two codes in
// the low bits of two 16-bit halves. Over 0x4300 (the bf16 of 128, whose last mantissa bit is worth
// 1) each half reads 128 + q exactly (biased_pair: one shift, one LOP3), and minus the bf16 pair of
// 128 + z it is q - z exactly, an integer of at most 5 bits (one HSUB2). What multiplies it by the
// group's scale is the solution's choice: fp32 per chunk (int4_gemm_mma: exact) or bf16 per weight
// (int4_gemm_sm90's wgmma path).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "solutions/common/bf16x2.h"
#include "solutions/common/frag_units.h"

namespace nibble::int4_frag {

using sol::frag_k;
using sol::frag_row;
using sol::kChunkK;
using sol::kSlabRows;
using sol::kWordsPerLaneChunk;

inline constexpr int kGroupK = 128;  // k per scale and zero point
inline constexpr uint32_t kBias = 0x4300u;  // bf16 bits of 128

/** The bit of the word at which register r's element e starts. */
NIBBLE_FRAG_HD constexpr int code_shift(int r, int e) { return 4 * r + 16 * e; }

/** The bf16 bits of 128 + v for v in 0..15 (exact: 8 significant bits). */
NIBBLE_FRAG_HD constexpr uint32_t bf16_128_plus(uint32_t v) { return kBias | v; }

/** Register r of a step word: the bf16 pair {128 + q0, 128 + q1}. */
NIBBLE_FRAG_HD constexpr uint32_t biased_pair(uint32_t word, int r) {
  return ((word >> (4 * r)) & 0x000F000Fu) | (kBias | (kBias << 16));
}

/**
 * The codes of an (N, K) plain int4 matrix (packed (N, K/2) uint8, the low nibble holding the even
 * k) in units of `group` slabs (sol::unit_index), N padded to n_pad (a multiple of 16 x group) with
 * code 0, k in `order` inside a chunk (sol::chunk_k). Returns n_pad / 16 x K / 64 units of 32 lanes
 * x 4 words. Throws std::invalid_argument unless K is a positive multiple of 128 and N <= n_pad.
 */
inline std::vector<uint32_t> repack_codes(const uint8_t* packed, int64_t N, int64_t K, int64_t n_pad, int group,
                                          sol::KOrder order = sol::KOrder::kStd) {
  if (N <= 0 || K <= 0 || K % kGroupK != 0 || n_pad < N || n_pad % (int64_t(kSlabRows) * group) != 0)
    throw std::invalid_argument("int4_frag: N " + std::to_string(N) + ", K " + std::to_string(K) + ", n_pad " +
                                std::to_string(n_pad) + ": K must be a positive multiple of 128, N <= n_pad, n_pad a " +
                                "multiple of 16 x the group");
  const int64_t slabs = n_pad / kSlabRows, nch = K / kChunkK;
  std::vector<uint32_t> words(size_t(slabs * nch * 32 * kWordsPerLaneChunk), 0u);
  for (int64_t s = 0; s < slabs; ++s)
    for (int64_t c = 0; c < nch; ++c) {
      uint32_t* unit = &words[size_t(sol::unit_index(s, c, nch, group) * 32 * kWordsPerLaneChunk)];
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kWordsPerLaneChunk; ++j) {
          const int g = lane / 4, t = lane % 4;
          uint32_t w = 0;
          for (int r = 0; r < 4; ++r)
            for (int e = 0; e < 2; ++e) {
              const int64_t n = s * kSlabRows + frag_row(g, r), k = c * kChunkK + sol::chunk_k(order, t, j, r, e);
              if (n >= N) continue;
              const uint8_t b = packed[n * (K / 2) + k / 2];
              w |= uint32_t((k & 1) ? (b >> 4) : (b & 0xF)) << code_shift(r, e);
            }
          unit[lane * kWordsPerLaneChunk + j] = w;
        }
    }
  return words;
}

}  // namespace nibble::int4_frag
